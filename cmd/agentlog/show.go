package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/sessionview"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/fatih/color"
	"github.com/mattn/go-runewidth"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newShowCmd(g *globals) *cobra.Command {
	var output, colorMode string
	var width int
	var full, follow bool
	c := &cobra.Command{
		Use:   "show ID [--output table|json] [--width N] [--full] [--follow] [--color auto|always|never]",
		Short: "Show a session for a human: its header, then its turns and steps, messages and tool calls, with times, durations and usage",
		Long: `show prints session ID as a readable view: the header (title, created, cwd, parent, events, turns,
usage own and inherited), then one line per item in seq order, indented under its turn and step: the
user and assistant messages, tool calls with their results (and how long they took), other events; a
run of streamed chunks is folded into the assistant message it built ("assistant (252 chunks)"), or
shown on its own when no message followed. A step's and a turn's end line give its duration and its
usage (the usage projection unit's figures over its events). Compactions (surface replaces), crash
repairs (interrupted turns, synthetic tool results) and the fork's end-seed marker are marked; the
events a fork inherited are dimmed.

Each line is cut to the terminal's width (--width N; 120 when stdout is not a terminal), and each text
to what fits; --full prints every text whole (on one line, newlines shown as spaces). It is colored on a
terminal and plain in a pipe or with NO_COLOR (--color always|never decides). --output json prints one
JSON object: the header fields and the nodes (turns with their steps and items; texts cut to 240
characters unless --full, with "cut" and "textRunes"). --follow goes on with each new event as it is
appended, until SIGINT (with --output json: JSON lines, one per line of the view); a session that does
not exist yet is waited for. ID may be a unique prefix.`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return &usageError{fmt.Errorf("--output must be table or json, got %q", output)}
			}
			if colorMode != "auto" && colorMode != "always" && colorMode != "never" {
				return &usageError{fmt.Errorf("--color must be auto, always or never, got %q", colorMode)}
			}
			if width < 0 || (width > 0 && width < 40) {
				return &usageError{fmt.Errorf("--width must be at least 40, got %d", width)}
			}
			id := args[0]
			ctx := cmd.Context()
			if !follow {
				var cancel context.CancelFunc
				ctx, cancel = g.withTimeout(ctx)
				defer cancel()
			}
			hctx, cancel := g.withTimeout(ctx)
			defer cancel()
			nc, c, err := g.client("agentlog-show")
			if err != nil {
				return err
			}
			defer nc.Close()
			h, err := c.Header(hctx, id)
			if errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrRemoving) && follow {
				h, err = waitForSession(ctx, g, c, id)
				if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
					return nil // SIGINT
				}
			}
			if err != nil {
				return clientExit(err)
			}
			bw := bufio.NewWriter(g.stdout)
			defer bw.Flush()
			r := newShowRenderer(bw, showWidth(g.stdout, width), full, useColor(g.stdout, colorMode))
			limit := 0
			if !full {
				limit = r.textLimit()
				if output == "json" {
					limit = 240
				}
			}
			var lines []sessionview.Line
			emit := func(l sessionview.Line) { lines = append(lines, l) }
			b := sessionview.NewBuilder(h, limit, func(l sessionview.Line) { emit(l) })
			err = c.Events(ctx, id, client.EventsQuery{}, func(ev session.Event) error {
				b.Add(ev)
				return nil
			})
			if err != nil {
				return err
			}
			v := b.Finish()
			if output == "json" && !follow {
				return writeJSON(bw, v, false)
			}
			if output == "json" {
				hv := *v
				hv.Nodes = nil
				if err := writeJSON(bw, hv, false); err != nil {
					return err
				}
			} else {
				r.header(v)
			}
			print := func(l sessionview.Line) {
				if output == "json" {
					_ = writeJSON(bw, struct {
						Depth int               `json:"depth"`
						End   bool              `json:"end,omitempty"`
						Node  *sessionview.Node `json:"node"`
					}{l.Depth, l.End, l.Node}, false)
					return
				}
				r.line(l)
			}
			for _, l := range lines {
				print(l)
			}
			lines = nil
			if !follow {
				if v.Turns.OpenTurn != nil {
					r.note(fmt.Sprintf("turn %d is open (no turn/end yet)", *v.Turns.OpenTurn))
				}
				return bw.Flush()
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			emit = func(l sessionview.Line) {
				print(l)
				_ = bw.Flush()
			}
			err = c.Events(ctx, id, client.EventsQuery{FromSeq: v.Events, Follow: true}, func(ev session.Event) error {
				b.Add(ev)
				return bw.Flush()
			})
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return bw.Flush() // SIGINT
			}
			return err
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "table", "table (a readable view) or json (one object)")
	c.Flags().IntVar(&width, "width", 0, "cut lines to N columns (default: the terminal's width, 120 in a pipe)")
	c.Flags().BoolVar(&full, "full", false, "print every text whole, not cut to the width")
	c.Flags().BoolVar(&follow, "follow", false, "go on with each new event as it is appended, until SIGINT")
	c.Flags().StringVar(&colorMode, "color", "auto", "auto (on a terminal, unless NO_COLOR is set), always or never")
	return c
}

// showWidth is the width the view is cut to: --width, else the terminal's, else 120.
func showWidth(w io.Writer, flag int) int {
	if flag > 0 {
		return flag
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols >= 40 {
			return cols
		}
	}
	return 120
}

// useColor decides whether the view is colored: --color always or never, or on auto when w is the
// process's stdout and fatih/color finds it a color terminal (a tty, NO_COLOR unset, TERM not dumb).
func useColor(w io.Writer, mode string) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := w.(*os.File)
	return ok && f == os.Stdout && !color.NoColor
}

// showRenderer writes the terminal view: a header, then one line per sessionview.Line, in columns SEQ,
// TIME (UTC), TOOK and the item, indented by depth, each line cut to width (display columns, so
// that wide characters count double).
type showRenderer struct {
	w                                                           io.Writer
	width                                                       int
	full                                                        bool
	lastDate                                                    string
	seq, faint, bold, user, assistant, tool, ok, bad, mark, dim func(a ...any) string
}

const (
	showSeqCol  = 11
	showTimeCol = 13
	showTookCol = 8
)

func newShowRenderer(w io.Writer, width int, full, colored bool) *showRenderer {
	mk := func(attrs ...color.Attribute) func(a ...any) string {
		c := color.New(attrs...)
		if colored {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
		return c.Sprint
	}
	return &showRenderer{w: w, width: width, full: full,
		seq: mk(color.Faint), faint: mk(color.Faint), bold: mk(color.Bold),
		user: mk(color.FgCyan, color.Bold), assistant: mk(color.FgGreen, color.Bold), tool: mk(color.FgYellow, color.Bold),
		ok: mk(color.FgGreen), bad: mk(color.FgRed, color.Bold), mark: mk(color.FgMagenta), dim: mk(color.Faint)}
}

// textLimit is how many runes of a text can show on a line of the view.
func (r *showRenderer) textLimit() int {
	return max(20, r.width-showSeqCol-showTimeCol-showTookCol)
}

func (r *showRenderer) header(v *sessionview.View) {
	kv := func(k, val string) { fmt.Fprintf(r.w, "%s %s\n", r.bold(fmt.Sprintf("%-9s", k)), val) }
	kv("session", termSafe(v.Session))
	title := "-"
	if v.Title != nil {
		title = oneLine(*v.Title)
	}
	kv("title", title)
	kv("created", time.UnixMilli(v.CreatedAt).UTC().Format("2006-01-02 15:04:05.000 MST"))
	if v.Cwd != "" {
		cwd := termSafe(v.Cwd)
		if !v.CwdRestorable {
			cwd += r.mark("  (not an absolute path: dsh cannot restore this session; agentlog import --cwd sets one)")
		}
		kv("cwd", cwd)
	}
	if v.ParentSession != "" {
		p := termSafe(v.ParentSession)
		if v.SeedLength != nil {
			p += fmt.Sprintf(", seed length %d (seqs 0..%d inherited)", *v.SeedLength, *v.SeedLength-1)
		}
		kv("parent", p)
	}
	open := "none"
	if v.Turns.OpenTurn != nil {
		open = strconv.FormatInt(*v.Turns.OpenTurn, 10)
	}
	kv("log", fmt.Sprintf("%s (last seq %d), %s (open: %s), %s, %s",
		plural(v.Events, "event"), v.LastSeq, plural(v.Turns.Count, "turn"), open,
		plural(int64(v.Compactions), "compaction"), plural(int64(v.Repairs), "crash repair")))
	kv("usage", usageText(v.Usage.Usage)+fmt.Sprintf(" (%s)", plural(v.Usage.Steps, "step")))
	if v.SeedLength != nil && *v.SeedLength > 0 {
		kv("", "own: "+usageText(v.Usage.Own.Usage)+"; inherited: "+usageText(v.Usage.Inherited.Usage))
	}
	fmt.Fprintln(r.w)
	fmt.Fprintln(r.w, r.faint(fmt.Sprintf("%-*s%-*s%-*s%s", showSeqCol, "SEQ", showTimeCol, "TIME (UTC)", showTookCol, "TOOK", "WHAT")))
}

// note prints a closing remark of the view.
func (r *showRenderer) note(s string) { fmt.Fprintln(r.w, r.mark("("+s+")")) }

// line prints one line of the view.
func (r *showRenderer) line(l sessionview.Line) {
	n := l.Node
	seqs := strconv.FormatInt(n.Seq, 10)
	t := n.Time
	if l.End {
		seqs = strconv.FormatInt(n.LastSeq, 10)
		if n.DurationMs != nil {
			t = n.Time + *n.DurationMs
		}
	} else if n.LastSeq > n.Seq && n.Kind != "turn" && n.Kind != "step" && n.Kind != "tool" {
		seqs += "-" + strconv.FormatInt(n.LastSeq, 10)
	}
	if d := time.UnixMilli(t).UTC().Format("2006-01-02"); d != r.lastDate && t > 0 {
		r.lastDate = d
		fmt.Fprintln(r.w, r.faint("── "+d+" ──"))
	}
	clock := ""
	if t > 0 {
		clock = time.UnixMilli(t).UTC().Format("15:04:05.000")
	}
	took := ""
	if l.End && n.DurationMs != nil {
		took = formatDuration(*n.DurationMs)
	}
	prefix := fmt.Sprintf("%-*s%-*s%-*s", showSeqCol, seqs, showTimeCol, clock, showTookCol, took)
	segs := append([]seg{{s: strings.Repeat("  ", l.Depth)}}, r.describe(n, l.End)...)
	room := -1 // display columns left for the text (-1: no limit)
	if !r.full {
		room = max(10, r.width-runewidth.StringWidth(prefix))
	}
	var b strings.Builder
	paintPrefix := r.seq
	if n.Inherited {
		paintPrefix = r.dim
	}
	b.WriteString(paintPrefix(prefix))
	for _, sg := range segs {
		text := sg.s
		if room >= 0 {
			w := runewidth.StringWidth(text)
			if w > room {
				text = runewidth.Truncate(text, room, "…")
				w = room
			}
			room -= w
		}
		paint := sg.paint
		if paint == nil || n.Inherited {
			paint = fmt.Sprint
			if n.Inherited {
				paint = r.dim
			}
		}
		if text != "" {
			b.WriteString(paint(text))
		}
		if room == 0 {
			break
		}
	}
	fmt.Fprintln(r.w, b.String())
}

// seg is a piece of a line and its color (nil: plain).
type seg struct {
	s     string
	paint func(a ...any) string
}

// describe is a node's text on its line, in colored pieces (cut later to the width).
func (r *showRenderer) describe(n *sessionview.Node, end bool) []seg {
	var marks []seg
	// A turn's, a step's and a tool call's marks go on its end line (its result), where they are
	// known when the view is followed live.
	if end || (n.Kind != "turn" && n.Kind != "step" && !(n.Kind == "tool" && n.Tool != "")) {
		for _, m := range n.Marks {
			marks = append(marks, seg{s: " [" + m + "]", paint: r.mark})
		}
	}
	text := oneLine(n.Text)
	// The marks follow the label, so that cutting the text to the width never hides them.
	out := func(s ...seg) []seg { return append(append(s[:1:1], marks...), s[1:]...) }
	switch n.Kind {
	case "turn":
		if end {
			segs := []seg{{s: fmt.Sprintf("turn %d ends: %s", n.Turn, n.Reason), paint: r.bold}}
			if n.Usage != nil && n.Usage.Steps > 0 {
				segs = append(segs, seg{s: " · " + usageText(n.Usage.Usage), paint: r.faint})
			}
			return out(segs...)
		}
		return out(seg{s: fmt.Sprintf("▸ turn %d", n.Turn), paint: r.bold})
	case "step":
		if end {
			segs := []seg{{s: fmt.Sprintf("step %d ends", n.Step), paint: r.faint}}
			if n.Usage != nil {
				segs = append(segs, seg{s: " · " + usageText(n.Usage.Usage), paint: r.faint})
			}
			return out(segs...)
		}
		return out(seg{s: fmt.Sprintf("▸ step %d", n.Step), paint: r.bold})
	case "user":
		return out(seg{s: "user", paint: r.user}, seg{s: " " + text})
	case "assistant":
		label := "assistant"
		var extra []string
		if n.Chunks > 0 {
			extra = append(extra, plural(int64(n.Chunks), "chunk"))
		}
		if n.Reasoning > 0 {
			extra = append(extra, fmt.Sprintf("reasoning %s chars", thousands(int64(n.Reasoning))))
		}
		if len(n.Calls) > 0 {
			extra = append(extra, "calls "+strings.Join(n.Calls, ", "))
		}
		if len(extra) > 0 {
			label += " (" + strings.Join(extra, "; ") + ")"
		}
		if text == "" && len(n.Calls) == 0 {
			return out(seg{s: label, paint: r.assistant}, seg{s: " (no text)", paint: r.faint})
		}
		if text == "" {
			return out(seg{s: label, paint: r.assistant})
		}
		return out(seg{s: label, paint: r.assistant}, seg{s: " " + text})
	case "stream":
		return out(seg{s: "stream (" + plural(int64(n.Chunks), "chunk") + ")", paint: r.assistant}, seg{s: " " + text})
	case "tool":
		if n.Result != nil && (end || n.Tool == "") {
			status := seg{s: "↳ ok", paint: r.ok}
			if n.Error {
				status = seg{s: "↳ error", paint: r.bad}
			}
			return out(status, seg{s: " " + oneLine(n.Result.Text)})
		}
		return out(seg{s: "tool " + n.Tool, paint: r.tool}, seg{s: " " + oneLine(n.Arguments)})
	}
	if text != "" {
		return out(seg{s: n.Type, paint: r.faint}, seg{s: " " + text})
	}
	return out(seg{s: n.Type, paint: r.faint})
}

// usageText is token usage in words: "in 7,893 · out 297 · reasoning 213".
func usageText(u projector.Usage) string {
	parts := []string{"in " + thousands(u.InputTokens), "out " + thousands(u.OutputTokens)}
	if u.CacheReadTokens > 0 {
		parts = append(parts, "cache read "+thousands(u.CacheReadTokens))
	}
	if u.CacheWriteTokens > 0 {
		parts = append(parts, "cache write "+thousands(u.CacheWriteTokens))
	}
	if u.ReasoningTokens > 0 {
		parts = append(parts, "reasoning "+thousands(u.ReasoningTokens))
	}
	return strings.Join(parts, " · ")
}

// thousands writes n with comma separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// formatDuration is a duration in ms for the TOOK column: 28ms, 3.8s, 2m05s, 1h02m.
func formatDuration(ms int64) string {
	if ms < 0 {
		return "-"
	}
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
