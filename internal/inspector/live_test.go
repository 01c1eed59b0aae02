package inspector_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

// TestLivePageResumesFromItsPosition renders a session page, opens its live stream with the
// position the page names (data-stream-seq), appends an event, and gets the update for it: the
// stream resumed after the record the page ended with. A stale position (the log moved on, or
// another instance rendered the page) reads the log from its start and updates all the same.
func TestLivePageResumesFromItsPosition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{})
	id := "live"
	if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), id).Append(ctx, 0, uiEvents()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base + "/sessions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`data-last-seq="(\d+)" data-stream-seq="(\d+)"`).FindSubmatch(page)
	if m == nil || string(m[2]) == "0" {
		t.Fatalf("the page names no position: %.300s", page)
	}
	last := string(m[1])
	for _, pos := range []string{string(m[2]), "1"} { // the page's, then a stale one
		lctx, lcancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(lctx, "GET", base+"/sessions/"+id+"/live?after="+last+"&pos="+pos+"&page=-1&last=1", nil)
		lresp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		tail, err := storetest.Session(s.Store(), id).Tail(ctx)
		if err != nil {
			t.Fatal(err)
		}
		next := tail.NextSeq
		ev := session.Event{Type: "session/title", Seq: next, Time: "1785000000100", Data: json.RawMessage(`{"title":"live title","messageSeqs":[],"source":{"kind":"fallback"}}`)}
		if _, err := storetest.Session(s.Store(), id).Append(ctx, tail.LastStreamSeq, []session.Event{ev}); err != nil {
			t.Fatal(err)
		}
		got := readUpdate(t, lresp.Body)
		if got != next {
			t.Errorf("pos %s: update at seq %d, want %d", pos, got, next)
		}
		lcancel()
		lresp.Body.Close()
		last = jsonInt(next)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// readUpdate reads SSE events from r until an "update", and returns its lastSeq.
func readUpdate(t *testing.T, r io.Reader) int64 {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "update":
			var u struct {
				LastSeq int64 `json:"lastSeq"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &u); err != nil {
				t.Fatal(err)
			}
			return u.LastSeq
		case strings.HasPrefix(line, "data: ") && event == "failed":
			t.Fatalf("live stream failed: %s", line)
		}
	}
	t.Fatalf("the live stream ended without an update: %v", sc.Err())
	return -1
}

// TestListBadQuery: a list query value that does not parse is answered 400 naming the parameter
// (it was a 200 page with a raw Go parse error); a good one is 200.
func TestListBadQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, base := startUIStack(t, ctx, devstack.UIOptions{})
	for q, want := range map[string]string{
		"sort=bogus":             "sort",
		"active=xyz":             `active=&#34;xyz&#34;: want a positive duration`,
		"active=-1h":             `active=&#34;-1h&#34;: want a positive duration`,
		"created_after=notadate": `created_after=&#34;notadate&#34;: want a date`,
		"":                       "",
		"active=1h":              "",
	} {
		resp, err := http.Get(base + "/?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want == "" {
			if resp.StatusCode != http.StatusOK {
				t.Errorf("?%s: %s, want 200", q, resp.Status)
			}
			continue
		}
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), want) {
			t.Errorf("?%s: %s, want 400 with %q: %.2000s", q, resp.Status, want, body)
		}
	}
}
