package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// importResult is what `agentlog import --json` prints. RepairedStrings counts the strings of
// event data whose ill-formed UTF-8 became U+FFFD (session/DEPARTURES.md 11), the first of them
// at FirstRepairedSeq.
type importResult struct {
	Session          string `json:"session"`
	Events           int64  `json:"events"`
	LastSeq          int64  `json:"lastSeq"`
	RepairedStrings  uint64 `json:"repairedStrings"`
	FirstRepairedSeq *int64 `json:"firstRepairedSeq,omitempty"`
}

func newImportCmd(g *globals) *cobra.Command {
	var id, cwd string
	var asJSON, idFromFilename bool
	c := &cobra.Command{
		Use:   "import FILE|DIR|- [--session ID] [--cwd DIR] [--json]",
		Short: "Append a dsh JSONL session log to a new session through the publisher",
		Long: `import reads a dsh JSONL log (optional header line, events, packed chunk rows) from FILE, or from
stdin with -, and validates the whole log first: a log that breaks a rule is refused with the seq and
the rule, and nothing is written; so is a log without events (rule empty-log). Only then does it create
the session and append the events through the publisher, written in the background while the log is
read, at most 8 MiB pending, so that a log of any length is imported in bounded memory (stdin is spooled to a temporary file for the second pass). If the
append fails part-way, what was written is removed again (as agentlog rm does) and the import can be
retried. The session id defaults to the one in the log's header; importing onto an existing session is
refused, saying what it holds (after an import that stopped part-way: agentlog rm ID, then import
again). A header id that is a template placeholder ("{{sessionId}}", as in 21 of the recorded dsh
sessions) is refused: pass --session ID. Ill-formed UTF-8 in event data becomes U+FFFD, as the
reference reads the file; a warning on stderr counts the strings and names the first seq. A progress
bar goes to stderr when it is a terminal. --json prints
{"session","events","lastSeq","repairedStrings","firstRepairedSeq"?}.

dsh restores a session only when its header's cwd is an absolute path: import warns on one that is not
(the recorded sessions carry "{{cwd}}/workspace"), and --cwd DIR sets the cwd (made absolute).

A directory imports each *.jsonl file in it, in name order, one after the other, and reports each on
its own line (--json: one JSON line per file, with "file" and, for a file that failed, "error"); the
others are skipped, saying how many. --session cannot name several sessions: --id-from-filename takes
each session id from its file's name (without .jsonl). It exits 1 when any file failed.`,
		Args: exactArgs(1, "one FILE or DIR argument (- for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("session") && blankID(id) {
				return &usageError{errors.New("--session must not be blank (leave it out to use the log header's id)")}
			}
			if cmd.Flags().Changed("cwd") {
				if strings.TrimSpace(cwd) == "" {
					return &usageError{errors.New("--cwd must not be blank")}
				}
				abs, err := filepath.Abs(cwd)
				if err != nil {
					return &usageError{fmt.Errorf("--cwd %s: %w", cwd, err)}
				}
				cwd = abs
			}
			var files []string
			dir := false
			if fi, err := os.Stat(args[0]); args[0] != "-" && err == nil && fi.IsDir() {
				dir = true
				if id != "" {
					return &usageError{fmt.Errorf("%s is a directory: --session names one session; use --id-from-filename, or import the files one by one", args[0])}
				}
				all, err := os.ReadDir(args[0])
				if err != nil {
					return err
				}
				skipped := 0
				for _, e := range all {
					if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".jsonl") {
						files = append(files, filepath.Join(args[0], e.Name()))
					} else {
						skipped++
					}
				}
				if skipped > 0 {
					fmt.Fprintf(g.stderr, "agentlog: import %s: %s, skipping %d entries that are not *.jsonl files\n", args[0], plural(int64(len(files)), "*.jsonl file"), skipped)
				}
				if len(files) == 0 {
					return fmt.Errorf("import %s: the directory holds no *.jsonl file", args[0])
				}
			} else {
				if idFromFilename && args[0] == "-" {
					return &usageError{errors.New("--id-from-filename needs a FILE or DIR, not stdin")}
				}
				files = []string{args[0]}
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			cctx, ccancel := g.withTimeout(ctx)
			nc, store, err := g.connect(cctx, "agentlog-import")
			ccancel()
			if err != nil {
				return err
			}
			defer nc.Close()
			failed := 0
			for _, f := range files {
				fid := id
				if idFromFilename {
					fid = strings.TrimSuffix(filepath.Base(f), ".jsonl")
				}
				fctx, fcancel := g.withTimeout(ctx) // --timeout bounds each file
				out, err := importFile(fctx, g, nc, store, f, fid, cwd)
				fcancel()
				if !dir {
					if err != nil {
						return err
					}
					if asJSON {
						return writeJSON(g.stdout, out, false)
					}
					fmt.Fprintf(g.stdout, "imported %d events into session %q\n", out.Events, out.Session)
					return nil
				}
				if err != nil {
					failed++
					if ctx.Err() != nil {
						return err
					}
				}
				if asJSON {
					line := struct {
						File string `json:"file"`
						importResult
						Error string `json:"error,omitempty"`
					}{File: f, importResult: out}
					if err != nil {
						line.Error = err.Error()
					}
					if werr := writeJSON(g.stdout, line, false); werr != nil {
						return werr
					}
				} else if err != nil {
					fmt.Fprintf(g.stdout, "%s: failed: %s\n", f, strings.TrimPrefix(err.Error(), f+": "))
				} else {
					fmt.Fprintf(g.stdout, "%s: imported %d events into session %q\n", f, out.Events, out.Session)
				}
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("import %s: %d of %d files failed (above); the others were imported", args[0], failed, len(files))}
			}
			return nil
		},
	}
	c.Flags().StringVar(&id, "session", "", "session id (default: the log header's id)")
	c.Flags().StringVar(&cwd, "cwd", "", "set the session header's cwd to `DIR` (made absolute; dsh restores only an absolute cwd)")
	c.Flags().BoolVar(&idFromFilename, "id-from-filename", false, "take the session id from the file's name without .jsonl (for a directory of logs)")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","events","lastSeq","repairedStrings","firstRepairedSeq"?}`)
	g.addMaxEventBytesFlag(c)
	return c
}

// importFile imports the log at arg (a file, or - for stdin) as a new session: id, when set,
// replaces the header's id, and cwd, when set, its cwd. Warnings (repaired text, a cwd dsh cannot
// restore) go to stderr.
func importFile(ctx context.Context, g *globals, nc *nats.Conn, st *store.Store, arg, id, cwd string) (importResult, error) {
	path, cleanup, v, err := validateImportSource(arg, g.stdin, id)
	if err != nil {
		return importResult{}, err
	}
	defer cleanup()
	h, n := v.header, v.events
	if id != "" && placeholderID(id) {
		return importResult{}, &usageError{fmt.Errorf("%s: refused, nothing written: --session %q is a template placeholder, not a session id", arg, id)}
	}
	if id == "" && placeholderID(h.ID) {
		return importResult{}, fmt.Errorf("%s: refused, nothing written: the header's id %q is a template placeholder, not a session id: pass --session ID (for a directory, --id-from-filename)", arg, h.ID)
	}
	if cwd != "" {
		h.Cwd, h.Raw = cwd, nil
	}
	// The largest event is checked against --max-event-bytes before anything is written
	// (one larger than a record is offloaded to AGENTLOG_BLOBS; one over the cap never stored).
	ss, err := st.Session(h.ID)
	if err != nil {
		return importResult{}, err
	}
	if err := ss.CheckEventSize(v.largest); err != nil {
		return importResult{}, fmt.Errorf("%s: refused: %w (--max-event-bytes); nothing was written", arg, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return importResult{}, err
	}
	defer f.Close()
	bar := newProgressBar(g.stderr, n, "import "+h.ID, "events")
	jr := session.NewJSONLReader(f, h.ID)
	res, err := importStream(ctx, st, nc, h, func() (session.Event, error) {
		ev, err := jr.Next()
		if err == nil && bar != nil {
			_ = bar.Add(1)
		}
		return ev, err
	})
	if bar != nil {
		_ = bar.Finish()
	}
	if errors.Is(err, publisher.ErrSessionExists) {
		return importResult{}, existsErr(ctx, st, h.ID, n, err)
	}
	if err != nil {
		return importResult{}, err
	}
	out := importResult{Session: h.ID, Events: res.events, LastSeq: res.events - 1, RepairedStrings: res.repaired}
	if res.repaired > 0 {
		out.FirstRepairedSeq = &res.firstRepaired
		strs := "strings"
		if res.repaired == 1 {
			strs = "string"
		}
		fmt.Fprintf(g.stderr, "agentlog: warning: session %q: ill-formed UTF-8 in %d %s of event data became U+FFFD, the first at seq %d (as the reference reads the file: session/DEPARTURES.md 11)\n",
			h.ID, res.repaired, strs, res.firstRepaired)
	}
	if !session.CwdRestorable(h.Cwd) {
		fmt.Fprintf(g.stderr, "agentlog: warning: session %q: the header's cwd %q is not an absolute path, so dsh cannot restore the session (nor a fork of it); import --cwd DIR sets one\n", h.ID, h.Cwd)
	}
	return out, nil
}

// placeholderID reports whether a header id is a template placeholder such as "{{sessionId}}"
// (the recorded dsh sessions' headers carry one), not a session id meant to be used.
func placeholderID(id string) bool {
	i := strings.Index(id, "{{")
	return i >= 0 && strings.Contains(id[i:], "}}")
}

// validateImportSource validates the log at arg (a path, or - for stdin, which is spooled to a
// temporary file on the way) and returns the file to append from, a cleanup that removes the spool
// file, and what validateLog found.
func validateImportSource(arg string, stdin io.Reader, idOverride string) (path string, cleanup func(), v validatedLog, err error) {
	cleanup = func() {}
	if arg != "-" {
		f, err := os.Open(arg)
		if err != nil {
			return "", cleanup, v, err
		}
		defer f.Close()
		v, err = validateLog(f, arg, idOverride)
		return arg, cleanup, v, err
	}
	spool, err := os.CreateTemp("", "agentlog-import-*.jsonl")
	if err != nil {
		return "", cleanup, v, fmt.Errorf("spool stdin: %w", err)
	}
	cleanup = func() { os.Remove(spool.Name()) }
	v, err = validateLog(io.TeeReader(stdin, spool), "stdin", idOverride)
	if cerr := spool.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("spool stdin: %w", cerr)
	}
	if err != nil {
		cleanup()
		return "", func() {}, v, err
	}
	return spool.Name(), cleanup, v, nil
}

// validatedLog is what validateLog found: the header (with the session id), the number of events
// and the largest event (by the bytes of its fields), which the caller checks against the
// stream's max message size.
type validatedLog struct {
	header  session.Header
	events  int64
	largest session.Event
}

// readLogFile reads and validates a whole dsh JSONL file into memory (the demo's small logs).
func readLogFile(path, idOverride string) (session.Header, []session.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return session.Header{}, nil, err
	}
	defer f.Close()
	v, err := validateLog(f, path, idOverride)
	h := v.header
	if err != nil {
		return h, nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return h, nil, err
	}
	_, events, err := session.ReadJSONL(f, h.ID)
	return h, events, err
}

// validateLog reads a dsh JSONL log from r to its end, one event at a time, and validates it as
// session.Load would, with the same errors in the same order: a read error (ReadJSONL's), then
// rule empty-log, then a missing id (a usage error), then the first event that breaks a rule. It
// keeps only the fold state (session.Surface) and the surface nodes a tool/result replace may read,
// never the events. name names r in errors; idOverride, when set, replaces the header's id. It
// returns the header (with the session id; a log without header gets a fresh one), the number of
// events and the largest one.
func validateLog(r io.Reader, name, idOverride string) (validatedLog, error) {
	// Without --session and without a header, errors name the file and line, not a session.
	jr := session.NewJSONLReader(r, idOverride)
	var h session.Header
	if hp := jr.Header(); hp != nil {
		h = *hp
	} else {
		h = session.Header{Version: 0, CreatedAt: time.Now().UnixMilli()}
	}
	if idOverride != "" {
		h.ID = idOverride
		h.Raw = nil
	}
	check := newStreamCheck(h.ID)
	var n int64
	var ruleErr error
	var largest session.Event
	largestSize := -1
	for {
		ev, err := jr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var se *session.Error
			if idOverride != "" && errors.As(err, &se) {
				err = se.ForSession(idOverride)
			}
			if idOverride == "" && jr.Header() == nil && errors.As(err, &se) && se.Line == 1 && se.Rule == session.RuleEnvelope {
				// Most often a header without its type: say what a header is.
				return validatedLog{}, fmt.Errorf("%s: %w (a header line is {\"type\":\"session\",\"id\":...}; a log without one needs --session ID)", name, err)
			}
			return validatedLog{}, fmt.Errorf("%s: %w", name, err)
		}
		n++
		if size := len(ev.Type) + len(ev.Time) + len(ev.Data) + len(ev.SurfaceOp) + len(ev.SourceEventSeqs); size > largestSize {
			largest, largestSize = ev, size
		}
		if ruleErr == nil && h.ID != "" {
			ruleErr = check.apply(ev)
		}
	}
	if n == 0 {
		return validatedLog{}, fmt.Errorf("%s: nothing written: %w", name, session.NewError(h.ID, -1, 0, session.RuleEmptyLog,
			"the log holds no events, and import creates a session from its events (a session without events is created through the API, publisher.Create)"))
	}
	if h.ID == "" {
		return validatedLog{}, &usageError{fmt.Errorf("%s has no header with a session id: pass --session ID", name)}
	}
	if ruleErr != nil {
		return validatedLog{}, fmt.Errorf("%s: refused, nothing written: %w", name, ruleErr)
	}
	return validatedLog{header: h, events: n, largest: largest}, nil
}

// streamCheck validates a session's events in order with the reference's rules (those of
// session.Session.Append) keeping only the fold state: the Surface, and for each surface node the
// event a tool/result replace may read (a tool/result whole, any other node by its type alone).
type streamCheck struct {
	id    string
	surf  *session.Surface
	nodes map[int64]session.Event
}

func newStreamCheck(id string) *streamCheck {
	return &streamCheck{id: id, surf: session.NewSurface(), nodes: map[int64]session.Event{}}
}

// notToolResult stands for a surface node that is not a tool/result: a replace aimed at it is
// refused by its type, before its data is read.
var notToolResult = []byte(`{}`)

func (c *streamCheck) apply(ev session.Event) error {
	if _, err := strconv.ParseFloat(string(ev.Time), 64); err != nil {
		// The publisher refuses it (it could not be stored as the reference reads it): say so
		// before anything is written.
		return session.NewError(c.id, ev.Seq, 0, session.RuleEnvelopeTime, "time is not a JSON number of Unix ms")
	}
	nodes := len(c.surf.Nodes)
	if err := c.surf.Apply(c.id, ev, c.lookup); err != nil {
		return err
	}
	if len(c.surf.Nodes) > nodes || ev.SurfaceOp != nil {
		if ev.Type != "tool/result" {
			ev = session.Event{Type: ev.Type, Seq: ev.Seq, Data: notToolResult}
		}
		c.nodes[ev.Seq] = ev
	}
	return nil
}

func (c *streamCheck) lookup(seq int64) (session.Event, error) {
	if ev, ok := c.nodes[seq]; ok {
		return ev, nil
	}
	return session.Event{}, fmt.Errorf("seq %d is not a surface node of the session", seq)
}

// importLog is importStream over events held in memory (the demo's); it returns the number written.
func importLog(ctx context.Context, st *store.Store, nc *nats.Conn, h session.Header, events []session.Event) (int64, error) {
	i := 0
	res, err := importStream(ctx, st, nc, h, func() (session.Event, error) {
		if i == len(events) {
			return session.Event{}, io.EOF
		}
		i++
		return events[i-1], nil
	})
	return res.events, err
}

// imported is what importStream wrote: the events, and the strings of their data whose ill-formed
// UTF-8 became U+FFFD, the first at seq firstRepaired.
type imported struct {
	events        int64
	repaired      uint64
	firstRepaired int64
}

// existsErr is an import's refusal of an id that exists (cause): it says what the session holds
// and, as an earlier import may have stopped part-way, how to start over.
func existsErr(ctx context.Context, st *store.Store, id string, fileEvents int64, cause error) error {
	holds := "no events"
	if ss, err := st.Session(id); err != nil {
		holds = fmt.Sprintf("events that cannot be read (%v)", err)
	} else if t, err := ss.TailFromLeader(ctx); err != nil {
		holds = fmt.Sprintf("events that cannot be read (%v)", err)
	} else if t.NextSeq > 0 {
		holds = fmt.Sprintf("%d events (last seq %d)", t.NextSeq, t.NextSeq-1)
	}
	return fmt.Errorf("%w: it holds %s (this log has %d); nothing was written. If an earlier import of it stopped part-way, `agentlog rm %s` then a new import replaces it",
		cause, holds, fileEvents, shellquote.Quote(id))
}

// importStream creates the session and appends the events next returns (until io.EOF) through the
// publisher, and returns what it wrote once it is durable. The publisher writes the
// events in the background, a window (importWindow) at a time, while the next ones are read; when
// importPendingBytes are pending, the import waits for them (Flush). The log must have been
// validated (validateLog). If anything fails, the writer is aborted and what the session holds is
// removed (rollbackImport), so the import can simply be retried.
func importStream(ctx context.Context, st *store.Store, nc *nats.Conn, h session.Header, next func() (session.Event, error)) (res imported, err error) {
	pub, err := publisher.New(st, nc, publisher.Options{
		Window:          importWindow,
		MaxPendingBytes: importPendingBytes,
		AttemptTimeout:  2 * time.Minute,
		// Faithful to the file as the reference reads it: ill-formed UTF-8 becomes U+FFFD (as
		// Node decodes the file), lone surrogate escapes stay.
		KeepLoneSurrogates: true,
	})
	if err != nil {
		return res, err
	}
	if err := refuseOrphanRecords(ctx, st, h.ID); err != nil {
		return res, err
	}
	w, err := pub.Create(ctx, h)
	if err != nil {
		return res, err
	}
	res.firstRepaired = -1
	for {
		ev, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = w.Append(ev)
			if errors.Is(err, publisher.ErrBacklog) {
				if err = w.Flush(ctx); err == nil {
					err = w.Append(ev)
				}
			}
		}
		if err != nil {
			return imported{}, rollbackImport(ctx, st, w, h.ID, err)
		}
		if n := w.SanitizedStrings(); n > res.repaired {
			if res.repaired == 0 {
				res.firstRepaired = ev.Seq
			}
			res.repaired = n
		}
		res.events++
	}
	if err := w.Close(ctx); err != nil {
		return imported{}, rollbackImport(ctx, st, w, h.ID, err)
	}
	return res, nil
}

// importWindow and importPendingBytes are the publisher's window and backlog bound during an
// import: a record every importWindow while the log is read, and at most importPendingBytes of
// events held (the memory an import holds beyond its validation state is a few times this).
const (
	importWindow       = 20 * time.Millisecond
	importPendingBytes = 8 << 20
)

// refuseOrphanRecords refuses an import onto id when the id holds records but no metadata (left
// by a writer that died between its first record and its check, or by an rm that stopped
// half-way): creating the metadata would succeed and the first write then conflict, leaving the
// id with metadata as well. Nothing is written.
func refuseOrphanRecords(ctx context.Context, st *store.Store, id string) error {
	ss, err := st.Session(id)
	if err != nil {
		return err
	}
	if _, err := ss.Info(ctx); !errors.Is(err, store.ErrSessionNotFound) {
		return nil // it exists (Create refuses it) or cannot be read (Create says why)
	}
	tail, err := ss.TailFromLeader(ctx)
	if err == nil && tail.LastStreamSeq == 0 {
		return nil
	}
	what := "records"
	if err == nil {
		what = fmt.Sprintf("records (to seq %d)", tail.NextSeq-1)
	} else if !errors.As(err, new(*session.Error)) {
		return fmt.Errorf("session %q: reading its log: %w", id, err)
	}
	return fmt.Errorf("session %q: the id holds %s without metadata (a write or a removal stopped half-way); nothing was written: run `agentlog rm %s` to clear it, then import again", id, what, shellquote.Quote(id))
}

// rollbackImport abandons a failed import: it stops the writer without flushing (a write in flight
// is cancelled and waited for), then removes the session, metadata and whatever records it got (as
// agentlog rm does), so that the import can be retried. The removal outlives ctx (an interrupt,
// --timeout), not a permission refusal of the command (credentials that may not remove). It
// returns the cause with what the store now holds (cause names the session).
func rollbackImport(ctx context.Context, st *store.Store, w *publisher.Writer, id string, cause error) error {
	w.Abort()
	rctx, refused := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if c := context.Cause(ctx); errors.Is(c, nats.ErrPermissionViolation) {
			refused(c)
		}
	})
	defer stop()
	rctx, cancel := context.WithTimeout(rctx, 30*time.Second)
	defer cancel()
	ss, err := st.Session(id)
	if err != nil {
		return fmt.Errorf("%w; %v", cause, err)
	}
	rm, err := ss.Remove(rctx)
	if err != nil && errors.Is(context.Cause(rctx), nats.ErrPermissionViolation) {
		return fmt.Errorf("%w; these credentials may not remove what it wrote (`agentlog rm %s` with the operator's removes it)", cause, shellquote.Quote(id))
	}
	if err != nil {
		return fmt.Errorf("%w; the session may be left with part of the import (`agentlog rm %s` removes it): %v", cause, shellquote.Quote(id), err)
	}
	if rm.Records > 0 {
		return fmt.Errorf("%w; the %d events written were removed again", cause, rm.Events)
	}
	return fmt.Errorf("%w; nothing was written", cause)
}

// newProgressBar returns a progress bar of total items on w when w is a terminal, else nil: a log
// file or a pipe gets no progress frames.
func newProgressBar(w io.Writer, total int64, desc, items string) *progressbar.ProgressBar {
	if !isTerminal(w) {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(items),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
}

// isTerminal reports whether f (an io.Reader or io.Writer) is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
