package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/wire"
)

// TestLongTitleIsCapped: a session whose title is 600 KB. The inspector's sessions list and the
// session's page show the title cut, marked with "…" and its whole length, and stay small (the
// list page was 1.8 MB); the title unit's view (projection endpoint) is capped the same way; the
// stored state and the log keep the whole title.
func TestLongTitleIsCapped(t *testing.T) {
	run := runTag(t)
	id := "it/" + run + "long-title"
	title := strings.Repeat("é", 300<<10) // 600 KB, two bytes a character
	file := writeLog(t, t.TempDir(), "title.jsonl",
		fmt.Sprintf(`{"type":"session","version":0,"id":%q,"createdAt":1785000000000}`, id),
		userLine(0, "hello"),
		fmt.Sprintf(`{"type":"session/title","seq":1,"time":1785000000001,"data":{"title":%q,"messageSeqs":[0],"source":{"kind":"fallback"}}}`, title))
	mustAgentlog(t, nil, "import", file)
	mustAgentlog(t, nil, "messages", id) // waits for the fold of seq 1

	ui := startProc(t, "--nats", devURL, "ui", "--listen", "127.0.0.1:0")
	ui.waitOutput(t, "agentlog ui: http://", 60*time.Second)
	base := regexp.MustCompile(`agentlog ui: (http://[^ ]+/)`).FindStringSubmatch(ui.out.String())[1]
	get := func(path string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	mark := fmt.Sprintf("(%d bytes)", len(title))
	for _, path := range []string{"/?prefix=" + url.QueryEscape(id), "/sessions/" + url.PathEscape(id)} {
		page := get(path)
		if len(page) > 200<<10 || !strings.Contains(page, "é…") || !strings.Contains(page, mark) {
			t.Fatalf("GET %s: %d bytes, want under 200 KiB with the title cut (…) and %q:\n%.3000s", path, len(page), mark, page)
		}
	}
	nc, st := connectStore(t, devURL, nil)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Projection(ctx, id, "title")
	if err != nil || len(r.View) > 1024 || !strings.Contains(string(r.View), fmt.Sprintf(`"titleBytes":%d`, len(title))) {
		t.Fatalf("the title unit's view: %d bytes (%v), want it capped with titleBytes %d", len(r.View), err, len(title))
	}
	tok, _ := wire.Token(id)
	e, err := storetest.ProjectionsKV(st).Get(ctx, "title."+tok)
	if err != nil || !strings.Contains(string(e.Value()), title) {
		t.Fatalf("the stored title state: %d bytes, %v; want the whole title", len(e.Value()), err)
	}
}
