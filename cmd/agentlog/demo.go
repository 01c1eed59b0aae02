package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/spf13/cobra"
)

func newDemoCmd(g *globals) *cobra.Command {
	var keep bool
	c := &cobra.Command{
		Use:   "demo [FILE...]",
		Short: "Run the whole stack on an embedded server in a temp dir and show a session end to end",
		Long: `demo starts an embedded nats-server with a projector and a forker in a temporary directory, appends a
built-in scripted session (or the given dsh JSONL files) through the publisher, and prints the events
written, the derived messages from the projector, a fork at a turn boundary with the child's messages,
and a fork inside an open turn, refused. Nothing outside the temp dir is touched.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), g.stdout, args, keep)
		},
	}
	c.Flags().BoolVar(&keep, "keep", false, "keep the temporary data directory and print its path")
	return c
}

// demoPrinter writes the demo's sections.
type demoPrinter struct{ w io.Writer }

func (p demoPrinter) section(title string) { fmt.Fprintf(p.w, "\n== %s ==\n", title) }
func (p demoPrinter) line(format string, a ...any) {
	fmt.Fprintf(p.w, format+"\n", a...)
}

func runDemo(ctx context.Context, out io.Writer, files []string, keep bool) error {
	dir, err := os.MkdirTemp("", "agentlog-demo-")
	if err != nil {
		return err
	}
	if keep {
		defer fmt.Fprintf(out, "\n(data kept in %s)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	p := demoPrinter{out}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{DataDir: dir, Listen: "127.0.0.1:0", Projectors: 1, Forkers: 1, Logger: quiet})
	if err != nil {
		return err
	}
	defer s.Close()
	p.line("agentlog demo: embedded nats-server at %s, data in %s", s.URL(), dir)
	p.line("streams %s and %s, KV buckets %s, %s, %s and %s, 1 projector, 1 forker", wire.StreamName, wire.ErrorsStream,
		wire.SessionsBucket, wire.ProjectionsBucket, wire.WritersBucket, projector.MembersBucket)

	type imported struct {
		h      session.Header
		events []session.Event
	}
	var sessions []imported
	if len(files) == 0 {
		events, err := demoEvents(time.Now().UnixMilli())
		if err != nil {
			return err
		}
		sessions = append(sessions, imported{session.Header{Version: 0, ID: demoSessionID, CreatedAt: time.Now().UnixMilli()}, events})
	}
	used := map[string]int{}
	for _, f := range files {
		h, events, err := readLogFile(f, "")
		if err != nil {
			return err
		}
		// Recorded logs often share a header id; give each file its own session.
		if n := used[h.ID]; n > 0 {
			h.ID = fmt.Sprintf("%s#%d", h.ID, n+1)
			h.Raw = nil
		}
		used[h.ID]++
		sessions = append(sessions, imported{h, events})
	}
	for _, im := range sessions {
		if err := demoOne(ctx, p, s, im.h, im.events); err != nil {
			return err
		}
	}
	return nil
}

// demoOne imports one session and shows its events, messages and two forks.
func demoOne(ctx context.Context, p demoPrinter, s *devstack.Stack, h session.Header, events []session.Event) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	id := h.ID
	p.section(fmt.Sprintf("session %q: appending %d events through the publisher (200 ms window, guarded records)", id, len(events)))
	if _, err := importLog(ctx, s.Store(), s.Conn(), h, events); err != nil {
		return err
	}
	ss, err := s.Store().Session(id)
	if err != nil {
		return err
	}
	var stored []session.Event
	if _, err := ss.Records(ctx, store.Collect(&stored)); err != nil {
		return err
	}
	p.section(fmt.Sprintf("events in the log (%d, read back from stream %s)", len(stored), "AGENTLOG"))
	for _, ev := range stored {
		p.line("  %s", summarizeEvent(ev))
	}
	msgs, err := queryMessages(ctx, s.Store(), s.Conn(), id, -2)
	if err != nil {
		return err
	}
	p.section(fmt.Sprintf("derived messages (deriveMessages, from the projector: %d)", len(msgs)))
	printMessages(p, msgs)

	c, err := client.New(s.Conn())
	if err != nil {
		return err
	}
	good, bad := demoForkBoundaries(stored)
	if good < 0 {
		p.section("fork at a turn boundary: skipped")
		p.line("  session %q has no closed turn before its last event to fork at", id)
	}
	if good >= 0 {
		child := id + "/fork-at-" + fmt.Sprint(good)
		res, err := c.Fork(ctx, client.ForkRequest{Source: id, Boundary: &good, Child: child})
		if err != nil {
			return fmt.Errorf("demo fork at %d: %w", good, err)
		}
		b, _ := json.Marshal(res)
		p.section(fmt.Sprintf("fork at turn boundary seq %d -> %s", good, b))
		cmsgs, err := queryMessages(ctx, s.Store(), s.Conn(), res.Child, -2)
		if err != nil {
			return err
		}
		p.line("child %q: %d seed events + session/end-seed; its messages (%d):", res.Child, res.SeedLength, len(cmsgs))
		printMessages(p, cmsgs)
	}
	if bad < 0 {
		p.section("fork inside an open turn: skipped")
		p.line("  session %q's last turn is too short to fork inside", id)
	}
	if bad >= 0 {
		_, err := c.Fork(ctx, client.ForkRequest{Source: id, Boundary: &bad, Child: id + "/fork-at-" + fmt.Sprint(bad)})
		var ce *client.Error
		switch {
		case errors.As(err, &ce) && errors.Is(err, client.ErrOpenTurn):
			p.section(fmt.Sprintf("fork inside an open turn, seq %d: refused", bad))
			p.line("  %s: %s", ce.Code, ce.Description)
		case err != nil:
			return err
		default:
			return fmt.Errorf("demo: fork at %d inside an open turn was not refused", bad)
		}
	}
	return nil
}

// demoForkBoundaries picks the last turn/end that is not the final event (a turn boundary) and an
// event inside the last turn (an open-turn boundary); -1 when there is none.
func demoForkBoundaries(events []session.Event) (good, bad int64) {
	good, bad = -1, -1
	var lastStart int64 = -1
	for _, ev := range events {
		switch ev.Type {
		case "turn/end":
			if ev.Seq < int64(len(events))-1 {
				good = ev.Seq
			}
		case "turn/start":
			lastStart = ev.Seq
		}
	}
	if lastStart >= 0 && lastStart+2 < int64(len(events)) {
		bad = lastStart + 2
	}
	return good, bad
}

func printMessages(p demoPrinter, msgs []json.RawMessage) {
	for i, m := range msgs {
		p.line("  [%d] %s", i, summarizeMessage(m))
	}
}

// summarizeEvent renders one event on one line: seq, type, surfaceOp and a short payload.
func summarizeEvent(ev session.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%3d %-18s", ev.Seq, ev.Type)
	if len(ev.SurfaceOp) > 0 {
		fmt.Fprintf(&b, " surfaceOp=%s", ev.SurfaceOp)
	}
	if len(ev.SourceEventSeqs) > 0 {
		fmt.Fprintf(&b, " sources=%s", ev.SourceEventSeqs)
	}
	fmt.Fprintf(&b, " %s", clip(string(ev.Data), 90))
	return b.String()
}

// summarizeMessage renders a derived message as role: text, with tool calls and results marked.
func summarizeMessage(raw json.RawMessage) string {
	var m struct {
		Role    string `json:"role"`
		Content []struct {
			Type       string          `json:"type"`
			Text       string          `json:"text"`
			Name       string          `json:"name"`
			Arguments  string          `json:"arguments"`
			ToolCallID string          `json:"toolCallId"`
			Content    json.RawMessage `json:"content"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return clip(string(raw), 110)
	}
	var parts []string
	for _, c := range m.Content {
		switch c.Type {
		case "text", "reasoning":
			parts = append(parts, fmt.Sprintf("%q", c.Text))
		case "tool-call":
			parts = append(parts, fmt.Sprintf("tool-call %s(%s)", c.Name, c.Arguments))
		case "tool-result":
			parts = append(parts, fmt.Sprintf("tool-result %s %s", c.ToolCallID, c.Content))
		default:
			parts = append(parts, c.Type)
		}
	}
	role := m.Role
	if role == "" {
		role = "(no role)"
	}
	return clip(fmt.Sprintf("%-9s %s", role+":", strings.Join(parts, " ")), 140)
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
