package inspector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/chromedp/cdproto/cdp"
	cdpcss "github.com/chromedp/cdproto/css"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The browser tests of the inspector's views for long sessions (issue 25): tabs, the
// conversation aligned and folded, times and durations, markdown, the time format, fork
// confirmation, projection rebuilds, CJK text.

// longStart is the first event's time of the generated sessions (Unix ms).
const longStart = 1785000000000

// markdownReply is an assistant's reply in markdown, with what the sanitiser must defuse.
const markdownReply = "## Plan for `f%d.go`\n\n1. read the file\n2. fix **the** test\n\n```go\nfunc F() int { return %d }\n```\n\n" +
	"| file | lines |\n|:--|--:|\n| f%d.go | 12 |\n\nSee [the docs](https://go.dev/doc/) or [this](javascript:window.__pwned=7) " +
	"<img src=x onerror=\"window.__pwned=8\"> ![diagram](https://example.invalid/d.png)"

// longEvents is an agent's session of turns turns at a human pace (events 1.5 s apart): a user
// message (some in Chinese and Japanese), a streamed reply in markdown with a tool call, its
// result, a closing reply; at the start of turn 4 a compaction replaces the nodes of turns 1-2.
func longEvents(turns int) []session.Event {
	var evs []session.Event
	var nodes []int64 // surface nodes so far
	add := func(typ, data string) int64 {
		seq := int64(len(evs))
		e := session.Event{Type: typ, Seq: seq, Time: json.Number(fmt.Sprint(longStart + seq*1500)), Data: json.RawMessage(data)}
		if session.SurfaceEligible(typ) {
			e.SurfaceOp = json.RawMessage(`"append"`)
			nodes = append(nodes, seq)
		}
		evs = append(evs, e)
		return seq
	}
	js := func(v string) string { b, _ := json.Marshal(v); return string(b) }
	var firstTwo []int64 // the nodes of turns 1-2
	for turn := 1; turn <= turns; turn++ {
		add("turn/start", fmt.Sprintf(`{"turn":%d}`, turn))
		if turn == 4 {
			seq := int64(len(evs))
			e := session.Event{Type: "user/message", Seq: seq, Time: json.Number(fmt.Sprint(longStart + seq*1500)),
				Data:      json.RawMessage(`{"id":"compact","role":"user","content":[{"type":"text","text":"Summary of turns 1-2: files f1.go and f2.go were fixed."}],"source":{"kind":"plugin","plugin":"compaction"}}`),
				SurfaceOp: json.RawMessage(fmt.Sprintf(`{"op":"replace","start":%d,"end":%d}`, firstTwo[0], firstTwo[len(firstTwo)-1]))}
			src, _ := json.Marshal(firstTwo)
			e.SourceEventSeqs = src
			evs = append(evs, e)
		}
		text := fmt.Sprintf("Please fix the failing test in f%d.go", turn)
		if turn%5 == 3 {
			text = fmt.Sprintf("请修复 f%d.go 中失败的测试。テストを直してください。", turn)
		}
		n0 := len(nodes)
		add("user/message", fmt.Sprintf(`{"id":"u%d","role":"user","content":[{"type":"text","text":%s}],"source":{"kind":"user"}}`, turn, js(text)))
		add("step/start", fmt.Sprintf(`{"turn":%d,"step":1}`, turn))
		for k := 0; k < 6; k++ {
			add("assistant/chunk", fmt.Sprintf(`{"turn":%d,"step":1,"chunk":{"type":"text-delta","index":0,"text":"w%d "}}`, turn, k))
		}
		add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":1,"message":{"id":"a%d","role":"assistant","content":[{"type":"text","text":%s},{"type":"tool-call","id":"c%d","name":"read","arguments":"{\"path\":\"f%d.go\"}"}],"source":{"kind":"model","provider":"p","model":"m"}}}`,
			turn, turn, js(fmt.Sprintf(markdownReply, turn, turn, turn)), turn, turn))
		add("tool/call", fmt.Sprintf(`{"turn":%d,"step":1,"callId":"c%d","name":"read","arguments":"{\"path\":\"f%d.go\"}"}`, turn, turn, turn))
		add("tool/result", fmt.Sprintf(`{"turn":%d,"step":1,"message":{"id":"r%d","role":"user","content":[{"type":"tool-result","toolCallId":"c%d","content":[{"type":"text","text":"package f\n\n// <b>not markdown</b>\nfunc F() int { return 0 }\n"}]}],"source":{"kind":"tool","callId":"c%d"}}}`, turn, turn, turn, turn))
		add("step/end", fmt.Sprintf(`{"turn":%d,"step":1}`, turn))
		add("step/start", fmt.Sprintf(`{"turn":%d,"step":2}`, turn))
		add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":2,"message":{"id":"b%d","role":"assistant","content":[{"type":"text","text":"Fixed: *F* now returns the right value."}],"source":{"kind":"model","provider":"p","model":"m"}}}`, turn, turn))
		add("step/end", fmt.Sprintf(`{"turn":%d,"step":2}`, turn))
		add("turn/end", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, turn))
		if turn <= 2 {
			firstTwo = append(firstTwo, nodes[n0:]...)
		}
	}
	return evs
}

// appendAll writes evs to a new session id (created at longStart) in records of 500 events.
func appendAll(t *testing.T, ctx context.Context, s *devstack.Stack, id string, evs []session.Event) {
	t.Helper()
	if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: longStart}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < len(evs); i += 500 {
		res, err := storetest.Session(s.Store(), id).Append(ctx, last, evs[i:min(i+500, len(evs))])
		if err != nil {
			t.Fatal(err)
		}
		last = res.StreamSeq
	}
}

// viewShot saves what the window shows (not the whole page) as dir/name.png.
func viewShot(t *testing.T, tab context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := dir + "/" + name + ".png"
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s", p)
}

// recordCSP makes every page of tab record its Content-Security-Policy violations in
// window.__csp (before the page's own script runs).
func recordCSP(t *testing.T, tab context.Context) {
	t.Helper()
	tabDo(t, tab, "record CSP violations", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.__csp = []; document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`})
		return err
	}))
}

// evalInt, evalStr and evalStrs evaluate a JavaScript expression in tab.
func evalInt(t *testing.T, tab context.Context, js string) int {
	t.Helper()
	return tabGet(t, tab, chromedp.Evaluate[int](js))
}

func evalStr(t *testing.T, tab context.Context, js string) string {
	t.Helper()
	return tabGet(t, tab, chromedp.Evaluate[string](js))
}

func evalStrs(t *testing.T, tab context.Context, js string) []string {
	t.Helper()
	return tabGet(t, tab, chromedp.Evaluate[[]string](js))
}

// visibleTabs lists the session page's sections shown.
const visibleTabs = `Array.from(document.querySelectorAll('section.tab')).filter(e => e.offsetParent !== null).map(e => e.id)`

// TestUILongSession: on a 30-turn session (about 500 events) each section is a tab that starts at
// the top of the page (with and without the script); the conversation shows the model view and
// the transcript aligned by seq, each shared message once, the compaction beside what it hides;
// the timeline has times and durations; markdown is rendered and defused under the strict CSP; the
// list and the session page show createdAt in one format.
func TestUILongSession(t *testing.T) {
	chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{AllowFork: true})
	dir := artifacts(t)
	evs := longEvents(30)
	appendAll(t, ctx, s, "long", evs)
	appendAll(t, ctx, s, "plain", opsEvents())
	longMsgs := messages(t, ctx, s, "long")
	plainMsgs := messages(t, ctx, s, "plain")

	tab := browser(t, ctx)
	recordCSP(t, tab)
	tabDo(t, tab, "list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`tr[data-id="long"]`)))
	listCreated := tabGet(t, tab, chromedp.TextContent(css(`tr[data-id="long"] td.time time`)))
	listActivity := tabGet(t, tab, chromedp.TextContent(css(`tr[data-id="long"] td.time:nth-of-type(4) time`)))

	tabDo(t, tab, "session page", chromedp.Navigate(base+"/sessions/long"), chromedp.WaitVisible(css(`#conv`)))
	viewShot(t, tab, dir, "ui-long-conversation")
	created := tabGet(t, tab, chromedp.TextContent(css(`#created`)))
	activity := tabGet(t, tab, chromedp.TextContent(css(`#last-activity time`)))
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`)
	if created != listCreated || !stamp.MatchString(created) || created != "2026-07-25 17:20:00 UTC" {
		t.Errorf("created: %q on the session page, %q in the list; want both 2026-07-25 17:20:00 UTC", created, listCreated)
	}
	if !stamp.MatchString(activity) || !stamp.MatchString(listActivity) || activity != "2026-07-25 17:32:45 UTC" {
		t.Errorf("the last event %q on the session page (want 2026-07-25 17:32:45 UTC), the last write %q in the list: want one format", activity, listActivity)
	}

	// Each tab starts near the top, alone.
	for _, name := range []string{"timeline", "forks", "projections", "raw", "conversation"} {
		tabDo(t, tab, "tab "+name, chromedp.Click(css(`.tabs a[data-tab="`+name+`"]`)), chromedp.WaitVisible(css(`#tab-`+name)))
		top := evalInt(t, tab, `Math.round(document.getElementById('tab-`+name+`').getBoundingClientRect().top + window.scrollY)`)
		shown := evalStrs(t, tab, visibleTabs)
		if top > 400 || len(shown) != 1 || shown[0] != "tab-"+name {
			t.Errorf("tab %s starts %d px down (want <= 400), sections shown %v", name, top, shown)
		}
		if name != "conversation" {
			viewShot(t, tab, dir, "ui-long-"+name)
		}
		if name == "timeline" {
			rows := evalInt(t, tab, `document.querySelectorAll('#timeline li.row').length`)
			clocks := evalInt(t, tab, `document.querySelectorAll('#timeline li.row > time.clock').length`)
			durs := evalStrs(t, tab, `Array.from(document.querySelectorAll('#timeline li.fold.turn > details > summary .dur')).map(e => e.textContent)`)
			took := evalStrs(t, tab, `Array.from(document.querySelectorAll('#timeline li.row[data-type="tool/result"] > .dur')).map(e => e.textContent)`)
			// A turn is 17 events 1.5 s apart: 24 s from turn/start to turn/end; a call 1.5 s to its result.
			if rows == 0 || clocks != rows || len(durs) == 0 || durs[len(durs)-1] != "24.0 s" || len(took) == 0 || took[0] != "call 1.50 s" {
				t.Errorf("timeline: %d rows, %d with a time; turn durations %v; tool results %v", rows, clocks, durs, took)
			}
		}
		if name == "forks" {
			bs := evalStrs(t, tab, `Array.from(document.querySelectorAll('#boundaries tr[data-boundary]')).map(r => r.dataset.boundary + ' ' + r.querySelector('.bmsg').textContent)`)
			if len(bs) != 30 || !strings.HasSuffix(bs[0], " Please fix the failing test in f1.go") || !strings.Contains(bs[2], "请修复 f3.go") {
				t.Errorf("fork boundaries: %d, first %q", len(bs), bs)
			}
		}
	}

	// The whole conversation: one row per shared message, the compaction beside the 8 entries of
	// turns 1-2 it hides, in seq order; the model view's JSON is the messages query's.
	tabDo(t, tab, "all of the conversation", chromedp.Navigate(base+"/sessions/long?all=1#tab-conversation"), chromedp.WaitVisible(css(`#conv`)))
	kinds := evalStrs(t, tab, `Array.from(document.querySelectorAll('#conv > li.crow')).map(r => r.className.replace('crow ', '') + ':' + r.dataset.seq)`)
	hidden := evalInt(t, tab, `document.querySelectorAll('#conv li.crow.diff .cell.transcript .msg').length`)
	modelJSON := evalStrs(t, tab, `Array.from(document.querySelectorAll('#conv pre.json')).map(p => p.textContent)`)
	msgs := evalInt(t, tab, `document.querySelectorAll('#conv .msg').length`)
	diffs, prev, sorted := 0, int64(-1), true
	for _, k := range kinds {
		kind, seq, _ := strings.Cut(k, ":")
		var n int64
		fmt.Sscan(seq, &n)
		sorted = sorted && n > prev
		prev = n
		if kind == "diff" {
			diffs++
		}
	}
	if diffs != 1 || !strings.HasPrefix(kinds[0], "diff:1") || hidden != 8 || !sorted || len(modelJSON) != len(longMsgs) || msgs != len(longMsgs)+8 {
		t.Errorf("conversation: rows %v (sorted %v), %d hidden entries beside the compaction, %d model messages of %d, %d messages shown",
			kinds[:min(3, len(kinds))], sorted, hidden, len(modelJSON), len(longMsgs), msgs)
	}
	for i := range min(len(modelJSON), len(longMsgs)) {
		if !sameJSONText(modelJSON[i], string(longMsgs[i])) {
			t.Errorf("model message %d: %s, the messages query says %s", i, modelJSON[i], longMsgs[i])
			break
		}
	}
	screenshot(t, tab, dir, "ui-conversation-compacted")

	// Markdown, rendered and defused.
	md := evalStrs(t, tab, `['.md h2', '.md ol li', '.md pre code.language-go', '.md table td[align="right"]', '.md a[href="https://go.dev/doc/"][rel~="noopener"]', '.md a[href="https://example.invalid/d.png"]'].map(s => s + '=' + document.querySelectorAll('#conv ' + s).length)`)
	for _, m := range md {
		if strings.HasSuffix(m, "=0") {
			t.Errorf("markdown: no %s", m)
		}
	}
	bad := evalInt(t, tab, `document.querySelectorAll('main script, main img, main [onerror], main [style], main a[href^="javascript"]').length`)
	rawAsText := evalInt(t, tab, `Array.from(document.querySelectorAll('#conv .md p')).filter(p => p.textContent.includes('<img src=x onerror="window.__pwned=8">')).length`)
	toolText := evalInt(t, tab, `Array.from(document.querySelectorAll('#conv .b-tool-result .text')).filter(e => e.textContent.includes('// <b>not markdown</b>')).length`)
	if bad != 0 || rawAsText == 0 || toolText == 0 || evalStr(t, tab, `String(window.__pwned)`) != "undefined" {
		t.Errorf("markdown: %d script/img/handler/style/javascript: elements, raw HTML as text in %d paragraphs, tool output as text in %d, __pwned %s",
			bad, rawAsText, toolText, evalStr(t, tab, `String(window.__pwned)`))
	}
	evalStr(t, tab, `document.querySelector('#conv .md h2').closest('.msg').scrollIntoView(), ''`)
	viewShot(t, tab, dir, "ui-markdown")

	// No compaction: the model view equals the transcript, each message once.
	tabDo(t, tab, "plain session", chromedp.Navigate(base+"/sessions/plain"), chromedp.WaitVisible(css(`#same-note`)))
	if d, n, both := evalInt(t, tab, `document.querySelectorAll('#conv .crow.diff').length`), evalInt(t, tab, `document.querySelectorAll('#conv .msg').length`),
		evalInt(t, tab, `document.querySelectorAll('#conv .crow.both').length`); d != 0 || n != len(plainMsgs) || both != len(plainMsgs) {
		t.Errorf("a session without compaction: %d diff rows, %d messages shown, %d shared rows; want 0, %d, %d", d, n, both, len(plainMsgs), len(plainMsgs))
	}
	screenshot(t, tab, dir, "ui-conversation-same")
	if v := evalStrs(t, tab, `window.__csp`); len(v) != 0 {
		t.Errorf("Content-Security-Policy violations: %v", v)
	}

	// Without the script, the stylesheet alone shows the tab the URL names (or holds its target).
	nojs, cancelNoJS := chromedp.NewContext(tab)
	defer cancelNoJS()
	tabDo(t, nojs, "script off", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}))
	for url, want := range map[string]string{
		"/sessions/long":                       "tab-conversation",
		"/sessions/long#tab-projections":       "tab-projections",
		"/sessions/long?seq=40#seq-40":         "tab-timeline",
		"/sessions/long?page=0#tab-timeline":   "tab-timeline",
		"/sessions/long#tab-forks":             "tab-forks",
		"/sessions/long#conv-" + fmt.Sprint(0): "tab-conversation",
	} {
		tabDo(t, nojs, "without script: "+url, chromedp.Navigate(base+url), chromedp.WaitReady(css(`footer`)))
		shown := evalStrs(t, nojs, visibleTabs)
		if len(shown) != 1 || shown[0] != want || evalStr(t, nojs, `document.getElementById('session-main').dataset.tab || ''`) != "" {
			t.Errorf("without script, %s shows %v, want [%s]", url, shown, want)
		}
	}
}

// sameJSONText reports whether a and b are the same JSON value.
func sameJSONText(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestUIRebuild: with --allow-admin a stopped unit is rebuilt from its page: one stopped by a
// fold fault (simulated: its stored state says stopped) recovers, one whose log breaks a rule
// stops again, saying where; without it the buttons are disabled and the POST refused; the POST
// is checked as a fork is (CSRF token, same origin) and names an existing unit.
func TestUIRebuild(t *testing.T) {
	chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{AllowAdmin: true})
	_, roBase := startUIStackOn(t, ctx, s, devstack.UIOptions{})
	dir := artifacts(t)
	appendAll(t, ctx, s, "fault", opsEvents())
	bad := append(opsEvents(), session.Event{Type: "todo/write", Seq: 4, Time: "1785000000004", Data: json.RawMessage(`{"todos":"not a list"}`)})
	appendAll(t, ctx, s, "broken", bad)
	messages(t, ctx, s, "fault")
	messages(t, ctx, s, "broken")
	// A fold fault: the title unit's stored state says it stopped (as a unit with a bug would).
	tok, err := wire.Token("fault")
	if err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.ProjectionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := wire.ProjectionKey(projector.UnitTitle, tok)
	var e natsjs.KeyValueEntry
	checkfor.Check(t, time.Minute, 50*time.Millisecond, func() error {
		if e, err = kv.Get(ctx, key); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	var v map[string]any
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		t.Fatal(err)
	}
	v["error"] = map[string]any{"seq": 1, "rule": "apply", "message": "simulated fold fault"}
	b, _ := json.Marshal(v)
	if _, err := kv.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}

	tab := browser(t, ctx)
	tabDo(t, tab, "a stopped unit", chromedp.Navigate(base+"/sessions/fault#tab-projections"), chromedp.WaitVisible(css(`#unit-title.stopped button[data-unit="title"]:not([disabled])`)))
	screenshot(t, tab, dir, "ui-projections-admin")
	tabDo(t, tab, "rebuild it", chromedp.Click(css(`button[data-unit="title"]`)), chromedp.WaitVisible(css(`#rebuilt-outcome`)))
	screenshot(t, tab, dir, "ui-rebuilt")
	if o := evalStr(t, tab, `document.getElementById('rebuilt-outcome').dataset.outcome`); o != "rebuilt" {
		t.Errorf("rebuild of a fold fault: outcome %q, text %q", o, evalStr(t, tab, `document.getElementById('rebuilt-outcome').textContent`))
	}
	tabDo(t, tab, "back", chromedp.Click(css(`#back-projections`)), chromedp.WaitVisible(css(`#unit-title:not(.stopped)`)))

	tabDo(t, tab, "a unit its log stops", chromedp.Navigate(base+"/sessions/broken#tab-projections"), chromedp.Click(css(`#unit-todos.stopped button[data-unit="todos"]`)),
		chromedp.WaitVisible(css(`#rebuilt-outcome`)))
	screenshot(t, tab, dir, "ui-rebuilt-stopped")
	if o, text := evalStr(t, tab, `document.getElementById('rebuilt-outcome').dataset.outcome`), evalStr(t, tab, `document.getElementById('rebuilt-outcome').textContent`); o != "stopped" || !strings.Contains(text, "stopped again at seq 4 (rule unit-data)") {
		t.Errorf("rebuild of a unit the log stops: outcome %q, %q", o, text)
	}

	// Read-only: disabled, and refused.
	tabDo(t, tab, "read-only", chromedp.Navigate(roBase+"/sessions/broken#tab-projections"), chromedp.WaitVisible(css(`#unit-todos button[data-unit="todos"][disabled]`)))
	post := func(base, body string, hdr ...string) (int, string) {
		return postForm(t, ctx, base+"/sessions/broken/rebuild", body, hdr...)
	}
	if code, body := post(roBase, "unit=todos&csrf=x"); code != 403 || !strings.Contains(body, "--allow-admin") {
		t.Errorf("rebuild on a read-only inspector: %d %s", code, body)
	}
	csrf := csrfOf(t, ctx, base+"/sessions/broken")
	if code, _ := post(base, "unit=todos"); code != 403 {
		t.Errorf("rebuild without the CSRF token: %d, want 403", code)
	}
	if code, _ := post(base, "unit=todos&csrf="+csrf, "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"); code != 403 {
		t.Errorf("cross-origin rebuild: %d, want 403", code)
	}
	if code, body := post(base, "unit=nope&csrf="+csrf); code != 400 || !strings.Contains(body, `no projection unit &#34;nope&#34;`) {
		t.Errorf("rebuild of an unknown unit: %d %s", code, body)
	}
	if code, _ := postForm(t, ctx, base+"/sessions/nobody/rebuild", "unit=todos&csrf="+csrf); code != 404 {
		t.Errorf("rebuild of an unknown session: %d, want 404", code)
	}
}

// TestUICJK: with fonts-noto-cjk (which .ci/run installs with chromium) Chinese, Japanese and
// Korean text renders in a CJK font, not as boxes: the fonts Chromium used for the message
// (CSS.getPlatformFontsForNode) include a CJK one, and two different ideographs draw differently
// from each other and from a code point no font has.
func TestUICJK(t *testing.T) {
	chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{})
	dir := artifacts(t)
	const text = "漢字とかな、한국어 텍스트。请修复失败的测试。"
	evs := opsEvents()
	evs[1].Data = json.RawMessage(`{"id":"m1","role":"user","content":[{"type":"text","text":"` + text + `"}],"source":{"kind":"user"}}`)
	evs = append(evs, session.Event{Type: "session/title", Seq: 4, Time: "1785000000004", Ignorable: true,
		Data: json.RawMessage(`{"title":"日本語のタイトル · 中文标题 · 한국어 제목","messageSeqs":[1],"source":{"kind":"plugin"}}`)})
	appendAll(t, ctx, s, "cjk", evs)
	messages(t, ctx, s, "cjk")

	tab := browser(t, ctx)
	sel := `#conv .msg[data-seq="1"] .md p`
	tabDo(t, tab, "CJK session", chromedp.Navigate(base+"/sessions/cjk"), chromedp.WaitVisible(css(sel)))
	screenshot(t, tab, dir, "ui-cjk")
	nodes := tabGet(t, tab, chromedp.Nodes(css(sel)))
	var fonts []*cdpcss.PlatformFontUsage
	tabDo(t, tab, "platform fonts", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, cdpcss.Enable, cdp.Empty{}); err != nil {
			return err
		}
		r, err := cdp.Call(ctx, tg, cdpcss.GetPlatformFontsForNode, cdpcss.GetPlatformFontsForNodeParams{NodeID: nodes[0].NodeID})
		fonts = r.Fonts
		return err
	}))
	var names []string
	cjkGlyphs := 0.0
	for _, f := range fonts {
		names = append(names, fmt.Sprintf("%s (%g glyphs)", f.FamilyName, f.GlyphCount))
		if regexp.MustCompile(`(?i)CJK|Han Sans|Han Serif|WenQuanYi|Droid Sans Fallback|IPA|Nanum|UnDotum`).MatchString(f.FamilyName) {
			cjkGlyphs += f.GlyphCount
		}
	}
	// Draw two ideographs and a code point no font has (U+10FFFD, private use) in the message's
	// font: boxes would all look alike.
	draw := `(() => {
		const font = getComputedStyle(document.querySelector('` + sel + `')).font;
		const png = ch => { const c = document.createElement('canvas'); c.width = c.height = 64; const x = c.getContext('2d');
			x.font = font.replace(/\d+(\.\d+)?px/, '48px'); x.fillText(ch, 4, 52); return c.toDataURL(); };
		return [png('漢'), png('字'), png('\u{10FFFD}')];
	})()`
	imgs := evalStrs(t, tab, draw)
	tofu := len(imgs) != 3 || imgs[0] == imgs[1] || imgs[0] == imgs[2]
	if cjkGlyphs < float64(len([]rune("漢字請修復測試"))) || tofu {
		msg := fmt.Sprintf("CJK text is not rendered in a CJK font (fonts used: %v; ideographs drawn alike or as the missing glyph: %v)", names, tofu)
		if os.Getenv("CI") == "true" || fontsInstalled() {
			t.Fatal(msg)
		}
		t.Skip(msg + ": fonts-noto-cjk is not installed (apt-get install -y fonts-noto-cjk; .ci/run installs it)")
	}
	t.Logf("fonts used for the CJK message: %v", names)
}

// fontsInstalled reports whether fontconfig lists a CJK font (fc-list :lang=zh).
func fontsInstalled() bool {
	out, err := exec.Command("fc-list", ":lang=zh", "family").Output()
	return err == nil && len(strings.TrimSpace(string(out))) > 0
}

// postForm posts a form body to url (headers in pairs) and returns the status and the body.
func postForm(t *testing.T, ctx context.Context, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// csrfOf reads the CSRF token of the page at url.
func csrfOf(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, rest, ok := strings.Cut(string(b), `name="csrf" value="`)
	if !ok {
		t.Fatalf("no CSRF token in %s", url)
	}
	return rest[:strings.IndexByte(rest, '"')]
}

// TestUIPages (no browser): every variant of a long session's page renders whole, naming the tab
// it opens on; the confirmation page of a fork says what was created; an edit-then-fork without
// a message or a boundary is refused before anything is forked.
func TestUIPages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{AllowFork: true})
	appendAll(t, ctx, s, "long", longEvents(30))
	messages(t, ctx, s, "long")
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for path, tab := range map[string]string{"/sessions/long": "conversation", "/sessions/long?all=1": "conversation", "/sessions/long?seq=40": "timeline",
		"/sessions/long?page=0": "timeline", "/sessions/long?page=99": "timeline", "/sessions/long?seq=99999": "timeline"} {
		code, body := get(path)
		if code != 200 || !strings.Contains(body, `<footer class="muted">rendered in`) || !strings.Contains(body, `data-default-tab="`+tab+`"`) {
			i := strings.Index(body, `id="error-text"`)
			t.Errorf("GET %s: %d, want the whole page opening on %s (error: %.300s)", path, code, tab, body[max(0, i):])
		}
	}
	if _, body := get("/sessions/long?all=1"); strings.Count(body, `<tr data-boundary=`) != 30 || !strings.Contains(body, `id="edit-transcript-`) {
		t.Errorf("?all=1: %d fork boundaries listed, want 30, and the hidden entries' edit forms", strings.Count(body, `<tr data-boundary=`))
	}

	res, err := fork(ctx, s, "long", 16, "long-child")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get("/sessions/" + res.Child + "/forked"); code != 200 || !strings.Contains(body, `was created from <a href="/sessions/long">long</a> at fork boundary seq 16`) ||
		!strings.Contains(body, "17 events copied (seqs 0–16)") || !strings.Contains(body, `<td class="num">17</td><td class="type">session/end-seed</td>`) {
		t.Errorf("the confirmation of a fork: %d\n%s", code, body)
	}
	if code, body := get("/sessions/long/forked"); code != 404 || !strings.Contains(body, "is not a fork") {
		t.Errorf("the confirmation page of a session that is not a fork: %d %s", code, body)
	}
	if code, _ := get("/sessions/nope/forked"); code != 404 {
		t.Errorf("the confirmation page of an unknown session: %d", code)
	}
	csrf := csrfOf(t, ctx, base+"/sessions/long")
	for body, want := range map[string]string{
		"edit=1&boundary=16&message=+%0A&csrf=" + csrf: "is empty: nothing was forked",
		"edit=1&message=hello&csrf=" + csrf:            "An edit-then-fork needs the boundary",
		"edit=1&boundary=x&message=hello&csrf=" + csrf: `fork boundary &#34;x&#34;: want a seq`,
	} {
		if code, page := postForm(t, ctx, base+"/sessions/long/fork", body); code != 400 || !strings.Contains(page, want) {
			t.Errorf("POST %s: %d, want 400 saying %q\n%s", body, code, want, page)
		}
	}
}

// TestUIEditFork: "edit this message and fork" on a user message that opens a turn (and "fork
// from here and edit the next message" on a turn end) starts from that message's text; the fork
// writes the seed, the end-seed marker and the edited message in one write and confirms what it
// created; the child's conversation ends with the edited message. An edit at a boundary inside a
// turn is refused whole: no child is left.
func TestUIEditFork(t *testing.T) {
	chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, base := startUIStack(t, ctx, devstack.UIOptions{AllowFork: true})
	dir := artifacts(t)
	evs := longEvents(3)
	appendAll(t, ctx, s, "edit", evs)
	messages(t, ctx, s, "edit")
	// Turn 1 ends at seq 16; turn 2's user message is seq 18.
	if evs[16].Type != "turn/end" || evs[18].Type != "user/message" {
		t.Fatalf("the fixture moved: seq 16 %s, seq 18 %s", evs[16].Type, evs[18].Type)
	}
	c, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		ids, err := c.SessionIDs(ctx, "edit", 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}

	tab := browser(t, ctx)
	form := `#edit-both-18`
	tabDo(t, tab, "the edit form", chromedp.Navigate(base+"/sessions/edit"), chromedp.Click(css(form+` > summary`)), chromedp.WaitVisible(css(form+` textarea`)))
	if v := tabGet(t, tab, chromedp.Value(css(form+` textarea`))); v != "Please fix the failing test in f2.go" {
		t.Errorf("the form starts from %q, want turn 2's message", v)
	}
	evalStr(t, tab, `document.querySelector('`+form+`').scrollIntoView({block: 'center'}), ''`)
	viewShot(t, tab, dir, "ui-editfork")
	// On a turn end in the timeline: the next turn's message.
	tabDo(t, tab, "the timeline's form", chromedp.Navigate(base+"/sessions/edit#tab-timeline"), chromedp.Click(css(`#edit-at-33 > summary`)), chromedp.WaitVisible(css(`#edit-at-33 textarea`)))
	if v := tabGet(t, tab, chromedp.Value(css(`#edit-at-33 textarea`))); !strings.Contains(v, "请修复 f3.go") {
		t.Errorf("the timeline's form at seq 33 starts from %q, want turn 3's message", v)
	}

	// Inside a turn: refused whole.
	before := count()
	csrf := csrfOf(t, ctx, base+"/sessions/edit")
	code, page := postForm(t, ctx, base+"/sessions/edit/fork", "edit=1&boundary=2&message=hi&csrf="+csrf)
	if code == 501 && strings.Contains(page, "edit-then-fork is not available") {
		// The seam in fork.go (forkThen) until the fork service's then-events are merged.
		t.Skip("edit-then-fork is not wired in this build (forkThen needs client.ForkRequest.Then): " + page[strings.Index(page, "refusal-text"):][:200])
	}
	if code != 409 || !strings.Contains(page, "OPEN_TURN") {
		t.Errorf("an edit inside a turn: %d\n%s", code, page)
	}
	if n := count(); n != before {
		t.Errorf("a refused edit-then-fork left %d sessions, %d before", n, before)
	}

	tabDo(t, tab, "the edit form again", chromedp.Navigate(base+"/sessions/edit"), chromedp.Click(css(form+` > summary`)), chromedp.WaitVisible(css(form+` textarea`)))
	const edited = "Please fix f2.go **and** add a test for F"
	tabDo(t, tab, "edit and fork", chromedp.SetValue(css(form+` textarea`), edited), chromedp.Click(css(form+` button[data-edit-boundary="16"]`)),
		chromedp.WaitVisible(css(`body[data-page="forked"] #forked-after`)))
	screenshot(t, tab, dir, "ui-editfork-forked")
	child := evalStr(t, tab, `document.body.dataset.id`)
	if after := tabGet(t, tab, chromedp.TextContent(css(`#forked-after`))); !strings.Contains(after, "17session/end-seed") || !strings.Contains(after, "18user/message"+edited) {
		t.Errorf("after the seed: %q", after)
	}
	stored, _, err := storetest.ReadAll(ctx, storetest.Session(s.Store(), child))
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 19 || stored[17].Type != "session/end-seed" || stored[18].Type != "user/message" || string(stored[18].SurfaceOp) != `"append"` ||
		!strings.Contains(string(stored[18].Data), `"text":"`+edited+`"`) || !strings.Contains(string(stored[18].Data), `"role":"user"`) {
		t.Fatalf("the child's log: %d events, the last %+v", len(stored), stored[len(stored)-1])
	}
	tabDo(t, tab, "the child", chromedp.Click(css(`#open-child`)), chromedp.WaitVisible(css(`#conv`)))
	msgs := messages(t, ctx, s, child)
	tabDo(t, tab, "the child, as of its last event", chromedp.Navigate(base+"/sessions/"+child), chromedp.WaitVisible(css(`#same-note`)))
	last := evalStr(t, tab, `(r => r.dataset.seq + ' ' + r.textContent)(Array.from(document.querySelectorAll('#conv > li.crow')).pop())`)
	if len(msgs) != 5 || !strings.HasPrefix(last, "18 ") || !strings.Contains(last, "Please fix f2.go and add a test for F") {
		t.Errorf("the child: %d messages, its last row %q", len(msgs), last)
	}
	screenshot(t, tab, dir, "ui-editfork-child")
}
