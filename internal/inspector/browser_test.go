package inspector_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// uiEvents is a session with everything the inspector marks: streamed chunks, a tool call with
// its result, HTML and script in messages and in the title, a compaction replace, and an open
// turn at the end.
func uiEvents() []session.Event {
	ev := func(seq int64, typ, data string) session.Event {
		e := session.Event{Type: typ, Seq: seq, Time: json.Number(fmt.Sprint(1785000000000 + seq)), Data: json.RawMessage(data)}
		if session.SurfaceEligible(typ) {
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		return e
	}
	replace := ev(12, "user/message", `{"id":"s1","role":"user","content":[{"type":"text","text":"summary of the earlier turn"}],"source":{"kind":"plugin","plugin":"compaction"}}`)
	replace.SurfaceOp = json.RawMessage(`{"op":"replace","start":1,"end":5}`)
	replace.SourceEventSeqs = json.RawMessage(`[1,5]`)
	title := ev(10, "session/title", `{"title":"Alpha <b>bold</b><script>window.__pwned='title'</script>","messageSeqs":[1],"source":{"kind":"plugin"}}`)
	title.Ignorable = true
	return []session.Event{
		ev(0, "turn/start", `{"turn":1}`),
		ev(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"hi <script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2;document.title='pwned'\">"}],"source":{"kind":"user"}}`),
		ev(2, "step/start", `{"turn":1,"step":1}`),
		ev(3, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Hel"}}`),
		ev(4, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"lo"}}`),
		ev(5, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"Hello </pre></details><script>window.__pwned=3</script>"},{"type":"tool-call","id":"c1","name":"read","arguments":"{\"path\":\"a\"}"}],"source":{"kind":"model","provider":"p","model":"m"}}}`),
		ev(6, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"read","arguments":"{\"path\":\"a\"}"}`),
		ev(7, "tool/result", `{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"<img src=x onerror=\"window.__pwned=4\">"}]}],"source":{"kind":"tool","callId":"c1"}}}`),
		ev(8, "step/end", `{"turn":1,"step":1}`),
		ev(9, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
		title,
		ev(11, "turn/start", `{"turn":2}`),
		replace,
		ev(13, "turn/end", `{"turn":2,"reason":{"kind":"completed"}}`),
		ev(14, "turn/start", `{"turn":3}`),
	}
}

// chromiumPath is the browser's path ("" when none is installed).
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// missingChromium is what a browser test says without chromium.
const missingChromium = "chromium not installed (apt-get install -y chromium; .ci/run installs it)"

// chromium returns the browser's path, or skips the test (fails it under CI=true, where .ci/run
// installs the browser and a skip would hide a broken install).
func chromium(t *testing.T) string {
	t.Helper()
	if p := chromiumPath(); p != "" {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(missingChromium + ", and CI=true: the browser tests must run")
	}
	t.Skip(missingChromium + ": skipping the browser test")
	return ""
}

// haveChromium reports whether the browser part of a test can run; without chromium it logs
// that it is left out (fails under CI=true).
func haveChromium(t *testing.T, what string) bool {
	t.Helper()
	if chromiumPath() != "" {
		return true
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(missingChromium + ", and CI=true: " + what + " must be checked")
	}
	t.Log(missingChromium + ": " + what + " is not checked")
	return false
}

// artifacts is where screenshots go: $AGENTLOG_ARTIFACTS, else the test's temp dir.
func artifacts(t *testing.T) string {
	dir := os.Getenv("AGENTLOG_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts headless Chromium (offline-friendly flags, a fresh profile) and returns a tab.
func browser(t *testing.T, ctx context.Context) context.Context {
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1366, 900))
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancel)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return tab
}

// tabDo runs steps in tab, failing the test with what on error.
func tabDo(t *testing.T, tab context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tab, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// tabGet runs one action in tab and returns its value, failing the test on error.
func tabGet[T any](t *testing.T, tab context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(tab, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func screenshot(t *testing.T, tab context.Context, dir, name string) {
	t.Helper()
	// From the top: a full-page capture draws the sticky bars where the page is scrolled to.
	if _, err := chromedp.Run(tab, chromedp.Evaluate[any](`window.scrollTo(0, 0)`)); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s", p)
}

// startUIStack runs the dev stack (server, projector, forker) with the inspector; it returns the
// inspector's base URL (without the token).
func startUIStack(t *testing.T, ctx context.Context, o devstack.UIOptions) (*devstack.Stack, string) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Listen = "127.0.0.1:0"
	s, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Projectors: 1, Forkers: 1, Logger: logger, UI: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the dev stack: %v", err)
		}
	})
	return s, baseURL(s.UI().URL())
}

// baseURL is an inspector URL without its ?token= and final slash.
func baseURL(url string) string {
	base, _, _ := strings.Cut(url, "/?")
	return strings.TrimSuffix(base, "/")
}

// messages returns the derived messages of id once the projector has applied its last event, as
// `agentlog messages ID` asks for them.
func messages(t *testing.T, ctx context.Context, s *devstack.Stack, id string) []json.RawMessage {
	t.Helper()
	tail, err := storetest.Session(s.Store(), id).Tail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Messages(ctx, id, client.MinSeq(tail.NextSeq-1))
	if err != nil {
		t.Fatalf("messages of %q: %v", id, err)
	}
	return r.Messages
}

// fork forks source at boundary (into child, unless "") through the fork service.
func fork(ctx context.Context, s *devstack.Stack, source string, boundary int64, child string) (client.ForkResult, error) {
	c, err := client.New(s.Conn())
	if err != nil {
		return client.ForkResult{}, err
	}
	return c.Fork(ctx, client.ForkRequest{Source: source, Boundary: &boundary, Child: child})
}

// opsEvents is one closed turn: a user message and the assistant's answer.
func opsEvents() []session.Event {
	ev := func(seq int64, typ, data string) session.Event {
		e := session.Event{Type: typ, Seq: seq, Time: "1785000000000", Data: json.RawMessage(data)}
		if typ == "user/message" || typ == "assistant/message" {
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		return e
	}
	return []session.Event{
		ev(0, "turn/start", `{"turn":1}`),
		ev(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`),
		ev(2, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"p","model":"m"}}}`),
		ev(3, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
	}
}

type css = chromedp.CSS

func TestUIBrowser(t *testing.T) {
	chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{AllowFork: true})
	dir := artifacts(t)
	id := "alpha"
	if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	res, err := storetest.Session(s.Store(), id).Append(ctx, 0, uiEvents())
	if err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, m := range messages(t, ctx, s, id) {
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}

	// The sessions list, live: it stays open while the session is forked in another tab.
	listTab := browser(t, ctx)
	tabDo(t, listTab, "list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`tr[data-id="alpha"]`)),
		chromedp.WaitVisible(css(`#live-status.on`)))
	screenshot(t, listTab, dir, "ui-list")

	tab, cancelTab := chromedp.NewContext(listTab)
	defer cancelTab()
	tabDo(t, tab, "session page", chromedp.Navigate(base+"/"), chromedp.Click(css(`tr[data-id="alpha"] a`)),
		chromedp.WaitVisible(css(`#conv`)))
	screenshot(t, tab, dir, "ui-session")
	modelJSON := tabGet(t, tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#conv pre.json')).map(p => p.textContent)`))
	pwned := tabGet(t, tab, chromedp.Evaluate[string](`String(window.__pwned)`))
	injected := tabGet(t, tab, chromedp.Evaluate[int](`document.querySelectorAll('main script, main img, main b').length`))
	docTitle := tabGet(t, tab, chromedp.Title())
	titleText := tabGet(t, tab, chromedp.TextContent(css(`#title`)))
	transcriptText := tabGet(t, tab, chromedp.Evaluate[string](`Array.from(document.querySelectorAll('#conv .cell.transcript')).map(c => c.textContent).join(' ')`))
	refusal := tabGet(t, tab, chromedp.TextContent(css(`li.row[data-seq="14"] .refusal`)))
	var got []any
	for _, j := range modelJSON {
		var v any
		if err := json.Unmarshal([]byte(j), &v); err != nil {
			t.Fatalf("model view JSON %q: %v", j, err)
		}
		got = append(got, v)
	}
	if len(got) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("the model view differs from the messages query:\n got %v\nwant %v", got, want)
	}
	if pwned != "undefined" || strings.Contains(docTitle, "pwned") || injected != 0 {
		t.Errorf("injected markup ran or was parsed: window.__pwned=%s, title %q, %d script/img/b elements in main", pwned, docTitle, injected)
	}
	if !strings.Contains(titleText, "<b>bold</b><script>") {
		t.Errorf("the title is not shown as text: %q", titleText)
	}
	if !strings.Contains(transcriptText, `<img src=x onerror="window.__pwned=2;document.title='pwned'">`) ||
		!strings.Contains(transcriptText, "hidden from the model: replaced by seq 12") {
		t.Errorf("transcript text: %q", transcriptText)
	}
	if w := `fork boundary 14 in session "alpha" ends inside open turn 3`; refusal != w {
		t.Errorf("open-turn refusal %q, want %q", refusal, w)
	}

	// Opened on demand: a chunk run's joined text, an event's raw line (as text).
	tabDo(t, tab, "expanders", chromedp.Click(css(`.tabs a[data-tab="timeline"]`)), chromedp.WaitVisible(css(`#timeline`)), chromedp.Click(css(`details.chunks[data-from="3"] summary`)), chromedp.WaitVisible(css(`pre.chunk-joined`)),
		chromedp.Click(css(`li.row[data-seq="1"] > details.ev-json summary`)), chromedp.WaitVisible(css(`li.row[data-seq="1"] > details.ev-json pre`)))
	if joined := tabGet(t, tab, chromedp.TextContent(css(`pre.chunk-joined`))); joined != "Hello" {
		t.Errorf("joined chunks %q, want Hello", joined)
	}
	line := tabGet(t, tab, chromedp.TextContent(css(`li.row[data-seq="1"] > details.ev-json pre`)))
	var lineEv session.Event
	if err := json.Unmarshal([]byte(line), &lineEv); err != nil || lineEv.Seq != 1 || !strings.Contains(string(lineEv.Data), "<script>") {
		t.Errorf("raw line of seq 1: %q (%v)", line, err)
	}
	if n := tabGet(t, tab, chromedp.Evaluate[int](`document.querySelectorAll('main script, main img').length`)); n != 0 {
		t.Errorf("%d script/img elements after the expanders", n)
	}

	// A fork inside an open turn, through the service: the reference's text, as the service says it.
	tabDo(t, tab, "fork refused", chromedp.Click(css(`.tabs a[data-tab="forks"]`)), chromedp.SetValue(css(`#forkform input[name="boundary"]`), "12"),
		chromedp.Submit(css(`#forkform`)), chromedp.WaitVisible(css(`#refusal-text`)))
	served := tabGet(t, tab, chromedp.TextContent(css(`#refusal-text`)))
	var refused *client.Error
	if _, err := fork(ctx, s, id, 12, ""); served == "" || !errors.As(err, &refused) || !errors.Is(err, client.ErrOpenTurn) || refused.Description != served {
		t.Errorf("refusal on the page %q, the fork service says %v", served, err)
	}

	// Fork at the boundary of turn 1: the confirmation page (what was created), then the child's
	// page, its tree, and the child live in the list.
	tabDo(t, tab, "fork", chromedp.Navigate(base+"/sessions/alpha#tab-timeline"), chromedp.Click(css(`li.row button[data-boundary="9"]`)),
		chromedp.WaitVisible(css(`body[data-page="forked"] #open-child`)))
	screenshot(t, tab, dir, "ui-forked")
	child := tabGet(t, tab, chromedp.Evaluate[string](`document.body.dataset.id`))
	if text := tabGet(t, tab, chromedp.TextContent(css(`#forked-text`))); !strings.Contains(text, "Session "+child+" was created from alpha at fork boundary seq 9") {
		t.Errorf("the confirmation says %q", text)
	}
	if after := tabGet(t, tab, chromedp.TextContent(css(`#forked-after`))); !strings.Contains(after, "10session/end-seed") {
		t.Errorf("after the seed: %q, want the end-seed marker at seq 10", after)
	}
	tabDo(t, tab, "open the child", chromedp.Click(css(`#open-child`)), chromedp.WaitVisible(css(`body[data-page="session"]:not([data-id="alpha"]) #conv`)),
		chromedp.Click(css(`.tabs a[data-tab="forks"]`)), chromedp.WaitVisible(css(`#tree li.tnode.current`)))
	treeText := tabGet(t, tab, chromedp.TextContent(css(`#tree`)))
	if child == "" || child == id || !strings.Contains(treeText, "alpha") || !strings.Contains(treeText, "forked at seq 9") {
		t.Errorf("after the fork: page of %q, tree %q", child, treeText)
	}
	screenshot(t, tab, dir, "ui-child")
	tabDo(t, listTab, "the child in the live list", chromedp.WaitVisible(css(fmt.Sprintf(`tr[data-id=%q]`, child))))
	screenshot(t, listTab, dir, "ui-list-live")

	// A live append: the page follows the session's subject.
	tabDo(t, tab, "parent page", chromedp.Navigate(base+"/sessions/alpha#tab-timeline"), chromedp.WaitVisible(css(`#live-status.on`)))
	if treeNow := tabGet(t, tab, chromedp.TextContent(css(`#tree`))); !strings.Contains(treeNow, child) {
		t.Errorf("the parent's tree lacks the child %q: %q", child, treeNow)
	}
	// A fork made elsewhere (through the client) appears in the open page's tree.
	if _, err := fork(ctx, s, id, 13, "alpha-2"); err != nil {
		t.Fatalf("fork: %v", err)
	}
	tabDo(t, tab, "the tree, live", chromedp.WaitReady(css(`#tree li.tnode[data-id="alpha-2"]`)))
	more := []session.Event{
		{Type: "user/message", Seq: 15, Time: "1785000000100", SurfaceOp: json.RawMessage(`"append"`),
			Data: json.RawMessage(`{"id":"m9","role":"user","content":[{"type":"text","text":"live message 42"}],"source":{"kind":"user"}}`)},
		{Type: "turn/end", Seq: 16, Time: "1785000000101", Data: json.RawMessage(`{"turn":3,"reason":{"kind":"completed"}}`)},
	}
	if _, err := storetest.Session(s.Store(), id).Append(ctx, res.StreamSeq, more); err != nil {
		t.Fatal(err)
	}
	tabDo(t, tab, "live append", chromedp.WaitVisible(css(`main[data-last-seq="16"]`)),
		chromedp.WaitVisible(css(`li.row[data-seq="16"] button[data-boundary="16"]`)),
		chromedp.WaitReady(css(`#boundaries-list tr[data-boundary="16"]`)))
	if liveText := tabGet(t, tab, chromedp.TextContent(css(`#conv`))); !strings.Contains(liveText, "live message 42") {
		t.Errorf("the live append is not in the model view: %q", liveText)
	}
	screenshot(t, tab, dir, "ui-live")

	// Dark mode: the page follows prefers-color-scheme.
	light := tabGet(t, tab, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	tabDo(t, tab, "dark mode", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return err
	}))
	if dark := tabGet(t, tab, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`)); dark == light {
		t.Errorf("prefers-color-scheme: dark leaves the background %s", dark)
	}
	screenshot(t, tab, dir, "ui-session-dark")

	// messages.json holds the derived messages (byte for byte what `agentlog messages` prints:
	// cmd/agentlog's TestUIDownloadsAreTheCLIOutput).
	var wantNow []any
	for _, m := range messages(t, ctx, s, id) {
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatal(err)
		}
		wantNow = append(wantNow, v)
	}
	mresp, err := http.Get(base + "/sessions/alpha/messages.json")
	if err != nil {
		t.Fatal(err)
	}
	mj, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	var gotNow []any
	if err := json.Unmarshal(mj, &gotNow); err != nil || !reflect.DeepEqual(gotNow, wantNow) {
		t.Errorf("messages.json differs from the messages query (%v):\n%s\n%v", err, mj, wantNow)
	}

	// The raw log is the session's dsh JSONL (`agentlog events`), every event as stored.
	resp, err := http.Get(base + "/sessions/alpha/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	stored, _, err := storetest.ReadAll(ctx, storetest.Session(s.Store(), id))
	if err != nil {
		t.Fatal(err)
	}
	h, rawEvents, err := session.ReadJSONL(strings.NewReader(string(raw)), id)
	if err != nil || h.ID != id || len(rawEvents) != len(stored) || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("raw log download: %v, %d events of %d, %q", err, len(rawEvents), len(stored), resp.Header.Get("Content-Disposition"))
	}
	for i := range stored {
		if err := sessiontest.SameEvent(rawEvents[i], stored[i]); err != nil {
			t.Errorf("raw log download: %v", err)
		}
	}
}

// TestUISecurity checks, without a browser, what every request goes through: the token (bearer,
// cookie login), loopback Host checks, read-only mode, CSRF and same-origin checks on fork, 404s.
func TestUISecurity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := devstack.StartUI(ctx, nil, devstack.UIOptions{Listen: "0.0.0.0:0"}, nil); err == nil || !strings.Contains(err.Error(), "--ui-token") {
		t.Errorf("a non-loopback address without a token: %v", err)
	}
	s, base := startUIStack(t, ctx, devstack.UIOptions{})
	if err := s.Store().CreateSession(ctx, session.Header{ID: "a/b <x>", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, url string, hdr map[string]string, body string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if r, body := do("GET", base+"/sessions/nope", nil, ""); r.StatusCode != 404 || !strings.Contains(body, `no session &#34;nope&#34;`) {
		t.Errorf("unknown session: %d %s", r.StatusCode, body)
	}
	if r, body := do("GET", base+"/sessions/a%2Fb%20%3Cx%3E", nil, ""); r.StatusCode != 200 || strings.Contains(body, "<x>") || !strings.Contains(body, "a/b &lt;x&gt;") {
		t.Errorf("an id with / and markup: %d", r.StatusCode)
	}
	if r, _ := do("GET", base+"/", map[string]string{"Host": "evil.example:80"}, ""); r.StatusCode != 403 {
		t.Errorf("a foreign Host header without a token: %d, want 403", r.StatusCode)
	}
	if r, body := do("POST", base+"/sessions/a%2Fb%20%3Cx%3E/fork", nil, "boundary=0"); r.StatusCode != 403 || !strings.Contains(body, "--allow-fork") {
		t.Errorf("fork on a read-only inspector: %d %s", r.StatusCode, body)
	}
	// A session whose todos unit stops: the page (as served, without script) shows the timeline,
	// the model view and the stopped unit with its seq and rule.
	if err := s.Store().CreateSession(ctx, session.Header{ID: "stopped", CreatedAt: 1785000000000, Cwd: "/work/<repo>", AgentPreset: "coder"}); err != nil {
		t.Fatal(err)
	}
	bad := append(opsEvents(), session.Event{Type: "todo/write", Seq: 4, Time: "1785000000004", Data: json.RawMessage(`{"todos":"not a list"}`)})
	if _, err := storetest.Session(s.Store(), "stopped").Append(ctx, 0, bad); err != nil {
		t.Fatal(err)
	}
	messages(t, ctx, s, "stopped")
	errSubj, _ := wire.ErrorsSubject("stopped")
	report := `{"type":"agent/error","session":"stopped","firstSeq":5,"lastSeq":6,"error":"write <b>failed</b>","time":1785000000009,"writerId":"w1","fenced":true}`
	js, err := natsjs.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, errSubj, []byte(report)); err != nil {
		t.Fatal(err)
	}
	if r, body := do("GET", base+"/sessions/stopped", nil, ""); r.StatusCode != 200 || !strings.Contains(body, `id="seq-4"`) ||
		!strings.Contains(body, "stopped at seq 4 (rule unit-data)") || !strings.Contains(body, "<dt>cwd</dt><dd><code>/work/&lt;repo&gt;</code></dd><dt>agent preset</dt><dd>coder</dd>") || !strings.Contains(body, "write &lt;b&gt;failed&lt;/b&gt; <span class=\"mark bad\">fenced</span>") || !strings.Contains(body, `<pre class="json">{&#34;id&#34;:&#34;m1&#34;`) {
		t.Errorf("stopped unit: %d\n%s", r.StatusCode, body)
	}
	if r, _ := do("GET", base+"/static/app.css", nil, ""); r.StatusCode != 200 || r.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("static asset: %d, CSP %q", r.StatusCode, r.Header.Get("Content-Security-Policy"))
	}

	// With a token and --allow-fork.
	_, tbase := startUIStackOn(t, ctx, s, devstack.UIOptions{Token: "s3cret", AllowFork: true})
	if r, _ := do("GET", tbase+"/", nil, ""); r.StatusCode != 401 {
		t.Errorf("no token: %d, want 401", r.StatusCode)
	}
	if r, _ := do("GET", tbase+"/", map[string]string{"Authorization": "Bearer wrong"}, ""); r.StatusCode != 401 {
		t.Errorf("a wrong token: %d, want 401", r.StatusCode)
	}
	if r, _ := do("GET", tbase+"/", map[string]string{"Authorization": "Bearer s3cret", "Host": "inspector.example"}, ""); r.StatusCode != 200 {
		t.Errorf("bearer token: %d, want 200", r.StatusCode)
	}
	r, _ := do("GET", tbase+"/sessions/x?token=s3cret&page=1", nil, "")
	var cookie string
	for _, c := range r.Cookies() {
		if c.Name == "agentlog_ui_token" && c.HttpOnly && c.SameSite == http.SameSiteStrictMode {
			cookie = c.Name + "=" + c.Value
		}
	}
	if r.StatusCode != 303 || r.Header.Get("Location") != "/sessions/x?page=1" || cookie == "" {
		t.Errorf("?token= login: %d, Location %q, cookie %q", r.StatusCode, r.Header.Get("Location"), cookie)
	}
	if r, _ := do("GET", tbase+"/", map[string]string{"Cookie": cookie}, ""); r.StatusCode != 200 {
		t.Errorf("cookie: %d, want 200", r.StatusCode)
	}
	page := func() string {
		_, body := do("GET", tbase+"/sessions/a%2Fb%20%3Cx%3E", map[string]string{"Cookie": cookie}, "")
		i := strings.Index(body, `name="csrf" value="`)
		if i < 0 {
			t.Fatalf("no CSRF token in the page")
		}
		rest := body[i+len(`name="csrf" value="`):]
		return rest[:strings.IndexByte(rest, '"')]
	}
	csrf := page()
	forkURL := tbase + "/sessions/a%2Fb%20%3Cx%3E/fork"
	if r, _ := do("POST", forkURL, map[string]string{"Cookie": cookie}, "boundary=0"); r.StatusCode != 403 {
		t.Errorf("fork without the CSRF token: %d, want 403", r.StatusCode)
	}
	if r, _ := do("POST", forkURL, map[string]string{"Cookie": cookie, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, "csrf="+csrf); r.StatusCode != 403 {
		t.Errorf("cross-origin fork: %d, want 403", r.StatusCode)
	}
	// The session has no events: the fork service's refusal, with the reference's text.
	if r, body := do("POST", forkURL, map[string]string{"Cookie": cookie}, "csrf="+csrf+"&boundary=0"); r.StatusCode != 409 || !strings.Contains(body, "INVALID_BOUNDARY") {
		t.Errorf("fork of an empty session: %d %s", r.StatusCode, body)
	}

	// HTTPS: the login cookie is Secure.
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	_, sbase := startUIStackOn(t, ctx, s, devstack.UIOptions{Token: "s3cret", TLSCert: certFile, TLSKey: keyFile})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(sbase + "/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(sbase, "https://") || resp.StatusCode != 303 || len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure {
		t.Errorf("HTTPS login at %s: %d, cookies %v", sbase, resp.StatusCode, resp.Cookies())
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentlog ui test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startUIStackOn starts an inspector on s's connection; it stops at cleanup.
func startUIStackOn(t *testing.T, ctx context.Context, s *devstack.Stack, o devstack.UIOptions) (*devstack.Stack, string) {
	t.Helper()
	o.Listen = "127.0.0.1:0"
	u, err := devstack.StartUI(ctx, s.Conn(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("ui: %v", err)
		}
	})
	return s, baseURL(u.URL())
}

// TestUISpeed measures, for a 10,000-event session, the server's time to the whole HTML of the
// session page, its weight (HTML, and the page's CSS and script), and Chromium's first
// contentful paint. The numbers are logged, not asserted (the machine is shared and noisy;
// the target is first content <= 500 ms).
func TestUISpeed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{})
	id := "long"
	if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	evs := sessiontest.AgentTurns(10000)
	var last uint64
	for i := 0; i < len(evs); i += 500 {
		res, err := storetest.Session(s.Store(), id).Append(ctx, last, evs[i:min(i+500, len(evs))])
		if err != nil {
			t.Fatal(err)
		}
		last = res.StreamSeq
	}
	// Wait for the projection (the page would wait for it too, and that is not what is measured).
	messages(t, ctx, s, id)
	get := func(url string) (int, time.Duration) {
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
		return len(b), time.Since(start)
	}
	var best time.Duration
	var size int
	for i := 0; i < 3; i++ {
		n, d := get(base + "/sessions/" + id)
		if i == 0 || d < best {
			best, size = d, n
		}
	}
	cssBytes, _ := get(base + "/static/app.css")
	jsBytes, _ := get(base + "/static/app.js")
	// The raw baseline: reading the session's events through the client, as the page does first.
	c, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	var raw time.Duration
	for i := 0; i < 3; i++ {
		start, n := time.Now(), 0
		if err := c.Events(ctx, id, client.EventsQuery{}, func(session.Event) error { n++; return nil }); err != nil || n != len(evs) {
			t.Fatalf("events: %d, %v", n, err)
		}
		if d := time.Since(start); i == 0 || d < raw {
			raw = d
		}
	}
	t.Logf("10,000-event session (%d events): HTML %d bytes (+ CSS %d, script %d), server time to the whole HTML %s, raw read of the events %s (best of 3 each; ratio %.1f)",
		len(evs), size, cssBytes, jsBytes, best.Round(time.Millisecond), raw.Round(time.Millisecond), float64(best)/float64(raw))
	if os.Getenv("AGENTLOG_UI_PROFILE") != "" {
		resp, _ := http.Get(base + "/sessions/" + id)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		os.WriteFile("/tmp/long.html", b, 0o644)
		for what, read := range map[string]func() error{
			"events":   func() error { return c.Events(ctx, id, client.EventsQuery{}, func(session.Event) error { return nil }) },
			"messages": func() error { _, err := c.Messages(ctx, id); return err },
			"status":   func() error { _, err := c.Status(ctx, id); return err },
		} {
			start := time.Now()
			err := read()
			t.Logf("client %s: %s (%v)", what, time.Since(start), err)
		}
	}
	if !haveChromium(t, "the first contentful paint") {
		return
	}
	tab := browser(t, ctx)
	var fcp float64
	for _, run := range []string{"cold", "warm"} { // the first navigation of a fresh browser is slower
		tabDo(t, tab, "open the long session", chromedp.Navigate(base+"/sessions/"+id+"?run="+run), chromedp.WaitVisible(chromedp.CSS(`#conv`)))
		fcp = tabGet(t, tab, chromedp.Evaluate[float64](`new Promise(done => {
			new PerformanceObserver(l => { const e = l.getEntriesByName('first-contentful-paint')[0]; if (e) done(e.startTime); }).observe({type: 'paint', buffered: true});
			setTimeout(() => done(-1), 5000);
		})`, chromedp.EvalAwaitPromise))
		timing := tabGet(t, tab, chromedp.Evaluate[[]float64](`(n => [n.responseStart, n.responseEnd, n.domContentLoadedEventEnd, n.transferSize])(performance.getEntriesByType('navigation')[0])`))
		t.Logf("chromium (%s): first contentful paint %.0f ms after navigation start; first byte %.0f ms, last byte %.0f ms, DOMContentLoaded %.0f ms, %.0f bytes transferred; target <= 500 ms",
			run, fcp, timing[0], timing[1], timing[2], timing[3])
	}
	fmt.Printf(`{"bench":"ui-session-10k","events":%d,"htmlBytes":%d,"serverMs":%.1f,"rawReadMs":%.1f,"ratio":%.2f,"fcpMs":%.0f}`+"\n",
		len(evs), size, float64(best.Microseconds())/1000, float64(raw.Microseconds())/1000, float64(best)/float64(raw), fcp)
}

// TestUILargeEvent: a 5 MiB tool result is not inlined whole: the model view carries its first
// InlineJSONBytes, says it was cut and how big it is, and links the whole event, which loads on
// demand (behind the token, as everything) as text; in a browser it replaces the cut JSON in place,
// escaped.
func TestUILargeEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{})
	big := `<script>window.__pwned=5</script>` + strings.Repeat("L", 5<<20)
	bigJSON, _ := json.Marshal(big)
	ev := func(seq int64, typ, data string) session.Event {
		e := session.Event{Type: typ, Seq: seq, Time: json.Number(fmt.Sprint(1785000000000 + seq)), Data: json.RawMessage(data)}
		if session.SurfaceEligible(typ) {
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		return e
	}
	events := []session.Event{
		ev(0, "turn/start", `{"turn":1}`),
		ev(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"read it"}],"source":{"kind":"user"}}`),
		ev(2, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"read","arguments":"{}"}`),
		ev(3, "tool/result", `{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":`+string(bigJSON)+`}]}],"source":{"kind":"tool","callId":"c1"}}}`),
	}
	if err := s.Store().CreateSession(ctx, session.Header{ID: "huge", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), "huge").Append(ctx, 0, events); err != nil {
		t.Fatal(err)
	}
	messages(t, ctx, s, "huge")
	get := func(url string, hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	r, page := get(base + "/sessions/huge")
	if r.StatusCode != 200 || len(page) > 512<<10 || !strings.Contains(page, `cut at 64.0 KiB of 5.0 MiB: <a class="ev-full" href="/sessions/huge/events/3">load the whole event</a>`) {
		t.Fatalf("the page of a 5 MiB tool result: %d, %d bytes, want < 512 KiB with the cut marked and linked", r.StatusCode, len(page))
	}
	t.Logf("the session page of a 5 MiB tool result: %d bytes", len(page))
	line, _ := events[3].AppendJSON(nil)
	r, whole := get(base + "/sessions/huge/events/3")
	if r.StatusCode != 200 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || whole != string(line)+"\n" {
		t.Fatalf("the whole event: %d %s, %d bytes, want the %d bytes of its line", r.StatusCode, r.Header.Get("Content-Type"), len(whole), len(line))
	}
	for path, want := range map[string]int{"/sessions/huge/events/9": 404, "/sessions/huge/events/x": 400, "/sessions/nope/events/0": 404} {
		if r, _ := get(base + path); r.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, r.StatusCode, want)
		}
	}
	if _, body := get(base + "/sessions/nope/events/0"); strings.Contains(body, "has no event at seq") {
		t.Errorf("an unknown session's event: %q, want it not found, not short of events", body)
	}
	_, tbase := startUIStackOn(t, ctx, s, devstack.UIOptions{Token: "s3cret"})
	if r, _ := get(tbase + "/sessions/huge/events/3"); r.StatusCode != 401 {
		t.Errorf("the whole event without the token: %d, want 401", r.StatusCode)
	}
	if r, body := get(tbase+"/sessions/huge/events/3", "Authorization", "Bearer s3cret"); r.StatusCode != 200 || body != string(line)+"\n" {
		t.Errorf("the whole event with the token: %d, %d bytes", r.StatusCode, len(body))
	}

	// In a browser the link loads the event in place of the cut JSON, as text.
	if !haveChromium(t, "the in-place load") {
		return
	}
	tab := browser(t, ctx)
	sel := `#conv .msg[data-seq="3"] details.msg-json`
	tabDo(t, tab, "load the whole event", chromedp.Navigate(base+"/sessions/huge"), chromedp.Click(css(sel+" summary")),
		chromedp.Click(css(sel+" a.ev-full")), chromedp.WaitVisible(css(sel+` p.cut:not(:has(a))`)))
	if n := tabGet(t, tab, chromedp.Evaluate[int](`document.querySelector('`+sel+` pre').textContent.length`)); n != len(line)+1 {
		t.Errorf("the pre holds %d characters after the load, want the event's %d", n, len(line)+1)
	}
	if pwned := tabGet(t, tab, chromedp.Evaluate[string](`String(window.__pwned)`)); pwned != "undefined" || tabGet(t, tab, chromedp.Evaluate[int](`document.querySelectorAll('main script').length`)) != 0 {
		t.Errorf("the loaded event's markup ran or was parsed: window.__pwned=%s", pwned)
	}
}
