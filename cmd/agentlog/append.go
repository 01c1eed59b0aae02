package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/spf13/cobra"
)

// appendResult is what `agentlog append --json` prints: the events of the file appended (seqs
// FirstSeq..LastSeq), and what resuming the session wrote before them (Open's crash-repair
// closers and end-seed marker, Resumed events from ResumedFirstSeq).
type appendResult struct {
	Session         string `json:"session"`
	Events          int64  `json:"events"`
	FirstSeq        int64  `json:"firstSeq"`
	LastSeq         int64  `json:"lastSeq"`
	Resumed         int    `json:"resumed"`
	ResumedFirstSeq *int64 `json:"resumedFirstSeq,omitempty"`
	Repaired        int    `json:"repaired"`
}

func newAppendCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "append ID [FILE|-] [--json]",
		Short: "Append dsh JSONL events to an existing session through the publisher (publisher.Open)",
		Long: `append resumes session ID as an agent does (publisher.Open: crash-repair closers when its last turn
is open, then a session/end-seed marker unless the log ends with one) and appends the dsh JSONL
events of FILE (default, or -, stdin) after them: one event object per line. An event without "seq"
gets the next one, after whatever the resume wrote; an event with a seq must carry exactly that one.
An event without "time" gets the current time. A header line or a packed chunk row is refused.

The whole file is checked first, against the session's log as it will be after the resume, with the
log's rules: a refused event is named with its seq and rule, and nothing is written (not even the
resume's closers). A live writer of the session is refused (its lease is held). A failure part-way
(a lost connection) says which seqs are durable. --json prints
{"session","events","firstSeq","lastSeq","resumed","resumedFirstSeq"?,"repaired"}.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return &usageError{fmt.Errorf("%s takes one session ID and at most one FILE (got %d arguments)", c.CommandPath(), len(args))}
			}
			if blankID(args[0]) {
				return &usageError{fmt.Errorf("%s: the session ID is blank", c.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id, src := args[0], "-"
			if len(args) == 2 {
				src = args[1]
			}
			path, cleanup, err := spoolInput(src, g.stdin)
			if err != nil {
				return err
			}
			defer cleanup()
			name := src
			if src == "-" {
				name = "stdin"
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, st, err := g.connect(ctx, "agentlog-append")
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, g.clientOptions()...)
			if err != nil {
				return err
			}
			// The log as it will be after the resume: read it (as every read does, an archived
			// session too), then add what Open will write.
			if _, err := c.Header(ctx, id); err != nil {
				if errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrRemoving) {
					return fmt.Errorf("session %q not found (append continues an existing session; agentlog import creates one)", id)
				}
				return err
			}
			var events []session.Event
			if err := c.Events(ctx, id, client.EventsQuery{}, func(ev session.Event) error {
				events = append(events, ev)
				return nil
			}); err != nil {
				return err
			}
			sess, err := session.Load(id, events)
			if err != nil {
				return fmt.Errorf("the stored log is refused, nothing was written: %w", err)
			}
			events = nil
			now := time.Now().UnixMilli()
			resume := sess.Continuation(now)
			for _, ev := range resume {
				if err := sess.Append(ev); err != nil {
					return fmt.Errorf("resuming: %w", err)
				}
			}
			first := sess.NextSeq()
			n, err := checkAppendFile(path, name, sess, st, now)
			if err != nil {
				return err
			}

			pub, err := publisher.New(st, nc, publisher.Options{Window: importWindow, MaxPendingBytes: importPendingBytes, AttemptTimeout: 2 * time.Minute})
			if err != nil {
				return err
			}
			w, err := pub.Open(ctx, id)
			if err != nil {
				return err
			}
			if w.NextSeq() != first {
				w.Abort()
				return fmt.Errorf("session %q changed while append checked %s (its next seq is %d, not %d: another writer?); nothing of the file was written: run append again", id, name, w.NextSeq(), first)
			}
			// Times left out are the time of the write, after the resume's end-seed (the check only
			// needed them to be numbers).
			written, err := appendFile(ctx, w, path, id, first, time.Now().UnixMilli())
			if err == nil {
				err = w.Close(ctx)
			}
			if err != nil {
				w.Abort()
				return fmt.Errorf("append to session %q failed after %d of %d events were admitted: %w; %s", id, written, n, err, durableText(w.DurableSeq(), first, n))
			}
			res := appendResult{Session: id, Events: n, FirstSeq: first, LastSeq: first + n - 1, Resumed: len(resume)}
			for _, ev := range resume {
				if ev.Type != "session/end-seed" {
					res.Repaired++
				}
			}
			if len(resume) > 0 {
				s := resume[0].Seq
				res.ResumedFirstSeq = &s
			}
			if asJSON {
				return writeJSON(g.stdout, res, false)
			}
			if res.Resumed > 0 {
				fmt.Fprintf(g.stdout, "resumed session %q: ", id)
				if res.Repaired > 0 {
					fmt.Fprintf(g.stdout, "%s (its last turn was open) and ", plural(int64(res.Repaired), "crash-repair closer"))
				}
				fmt.Fprintf(g.stdout, "the end-seed marker, from seq %d\n", *res.ResumedFirstSeq)
			}
			fmt.Fprintf(g.stdout, "appended %s to session %q (seqs %d..%d)\n", plural(n, "event"), id, res.FirstSeq, res.LastSeq)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","events","firstSeq","lastSeq","resumed","resumedFirstSeq"?,"repaired"}`)
	g.addMaxEventBytesFlag(c)
	return c
}

// checkAppendFile reads the event lines of the file at path (named name in errors) as the events
// after sess (their seqs assigned from sess.NextSeq(), missing times nowMs) and appends each to
// sess with the log's rules, after repairing text as the publisher does. It returns the number of
// events; a refusal names the line, the seq and the rule, and says nothing was written.
func checkAppendFile(path, name string, sess *session.Session, st *store.Store, nowMs int64) (int64, error) {
	ss, err := st.Session(sess.ID())
	if err != nil {
		return 0, err
	}
	var n int64
	err = eachEventLine(path, name, sess.ID(), func(line []byte, lineNo int) error {
		ev, err := session.DecodeNextEvent(line, sess.ID(), sess.NextSeq(), nowMs)
		if err == nil {
			ev.Data, _ = session.SanitizeText(ev.Data, false) // as publisher.Writer.Append does
			if err = ss.CheckEventSize(ev); err == nil {
				err = sess.Append(ev)
			}
		}
		if err != nil {
			return fmt.Errorf("%s:%d: refused, nothing was written: %w", name, lineNo, err)
		}
		n++
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: nothing written: %w", name, session.NewError(sess.ID(), -1, 0, session.RuleEmptyLog, "the file holds no events"))
	}
	return n, nil
}

// appendFile appends the event lines of path to w (seqs from first, as checkAppendFile assigned
// them) and returns how many it admitted. It waits for the window when too much is pending.
func appendFile(ctx context.Context, w *publisher.Writer, path, id string, first, nowMs int64) (int64, error) {
	var n int64
	err := eachEventLine(path, path, id, func(line []byte, _ int) error {
		ev, err := session.DecodeNextEvent(line, id, first+n, nowMs)
		if err != nil {
			return err
		}
		err = w.Append(ev)
		if errors.Is(err, publisher.ErrBacklog) {
			if err = w.Flush(ctx); err == nil {
				err = w.Append(ev)
			}
		}
		if err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

// eachEventLine calls fn with each non-blank line of the file at path and its 1-based number. A
// line over session.MaxLineBytes is refused naming name (the file as the user gave it) and
// session id (which may be "").
func eachEventLine(path, name, id string, fn func(line []byte, lineNo int) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if len(line) > session.MaxLineBytes+1 {
			return fmt.Errorf("%s: refused, nothing was written: %w", name, session.NewError(id, -1, lineNo, session.RuleLineLength, fmt.Sprintf("line is longer than %d bytes", session.MaxLineBytes)))
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if ferr := fn(t, lineNo); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// spoolInput returns the path of the file to read arg from: arg itself, or for "-" a temporary
// copy of stdin (so that it can be read twice: checked, then appended), with the cleanup that
// removes it. A directory is refused.
func spoolInput(arg string, stdin io.Reader) (string, func(), error) {
	if arg != "-" {
		fi, err := os.Stat(arg)
		if err != nil {
			return "", func() {}, err
		}
		if fi.IsDir() {
			return "", func() {}, fmt.Errorf("%s is a directory: give one file of dsh JSONL events (or - for stdin)", arg)
		}
		return arg, func() {}, nil
	}
	spool, err := os.CreateTemp("", "agentlog-stdin-*.jsonl")
	if err != nil {
		return "", func() {}, fmt.Errorf("spool stdin: %w", err)
	}
	cleanup := func() { os.Remove(spool.Name()) }
	_, err = io.Copy(spool, stdin)
	if cerr := spool.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return "", func() {}, fmt.Errorf("spool stdin: %w", err)
	}
	return spool.Name(), cleanup, nil
}

// readThenEvents reads the then-events of fork --then (FILE, or - for stdin): one event object per
// non-blank line, checked to be JSON objects here (the forker checks them against the child's
// log). Errors name the line.
func readThenEvents(arg string, stdin io.Reader) ([]json.RawMessage, error) {
	path, cleanup, err := spoolInput(arg, stdin)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--then: %w", err)}
	}
	defer cleanup()
	name := arg
	if arg == "-" {
		name = "stdin"
	}
	var out []json.RawMessage
	err = eachEventLine(path, "--then "+name, "", func(line []byte, lineNo int) error {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(line, &obj); err != nil {
			why := "not a JSON event object: " + err.Error()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				why = fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
			}
			return fmt.Errorf("--then %s: refused, nothing was written: %w", name, session.NewError("", -1, lineNo, session.RuleJSON, why))
		}
		out = append(out, append(json.RawMessage(nil), line...))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &usageError{fmt.Errorf("--then %s holds no events", name)}
	}
	return out, nil
}

// plural is "1 event", "2 events".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// durableText says which of the file's n events (seqs first..first+n-1) are durable when every
// event with seq below durable is stored (publisher.Writer.DurableSeq).
func durableText(durable, first, n int64) string {
	if durable <= first {
		return "none of the file's events is durable"
	}
	return fmt.Sprintf("the file's events up to seq %d are durable (%d of %d), the rest are not written", durable-1, durable-first, n)
}
