package session

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// DecodeNextEvent decodes one event line to append to session id, whose next seq is next: a dsh
// JSONL event object as DecodeEventLine reads it, except that "seq" and "time" may be left out. A
// missing seq becomes next and a missing time nowMs (Unix ms). Refusals are *Error naming id:
// a seq other than next (rule seq-contiguous), a time that is not a number (envelope-time), a
// packed chunk row or a header line (record), and DecodeEventLine's. It checks the envelope only:
// the log's rules are Surface.Apply's.
func DecodeNextEvent(line []byte, id string, next, nowMs int64) (Event, error) {
	line = bytes.TrimSpace(line)
	v, err := jsvalue.ParseShallow(line, "type", "seq", "time", "ignorable", "version", "id")
	if err != nil {
		return Event{}, newError(id, next, 0, RuleJSON, err.Error())
	}
	if v.Kind() == jsvalue.Object {
		if t := v.Field("type"); v.Field("version") != nil && (t == nil || (t.Kind() == jsvalue.String && t.Str() == "session")) {
			return Event{}, newError(id, next, 0, RuleRecord, "a session header line, not an event (events only: agentlog events --no-header prints them)")
		}
		var add []byte
		if v.Field("seq") == nil {
			add = append(append(add, `"seq":`...), strconv.FormatInt(next, 10)...)
		}
		if v.Field("time") == nil {
			if len(add) > 0 {
				add = append(add, ',')
			}
			add = append(append(add, `"time":`...), strconv.FormatInt(nowMs, 10)...)
		}
		if len(add) > 0 { // insert the missing keys first: the object has none of them
			rest := bytes.TrimSpace(line[1:])
			buf := append([]byte{'{'}, add...)
			if len(rest) > 0 && rest[0] != '}' {
				buf = append(buf, ',')
			}
			line = append(buf, rest...)
		}
	}
	ev, err := decodeEventLineGeneral(line, id)
	if err != nil {
		return Event{}, err
	}
	if ev.Seq != next {
		return Event{}, newError(id, ev.Seq, 0, RuleSeqContiguous,
			fmt.Sprintf("event seq %d is not the session's next seq %d (leave seq out to have the next one assigned)", ev.Seq, next))
	}
	if _, ok := timeValue(ev.Time); !ok {
		return Event{}, newError(id, ev.Seq, 0, RuleEnvelopeTime, "time is not a JSON number of Unix ms (leave it out for the current time)")
	}
	return ev, nil
}

// Continuation returns the events that resuming a stored session appends before its own writes,
// as publisher.Open writes them: the crash-repair closers when its last turn is open, then a
// session/end-seed marker (time nowMs) unless the log already ends with one. s is the loaded log;
// the events are not appended to it.
func (s *Session) Continuation(nowMs int64) []Event {
	tail := s.Repair()
	last := ""
	if n := len(s.events); n > 0 {
		last = s.events[n-1].Type
	}
	if len(tail) > 0 {
		last = tail[len(tail)-1].Type
	}
	if last != "session/end-seed" {
		tail = append(tail, EndSeed(s.NextSeq()+int64(len(tail)), nowMs))
	}
	return tail
}

// Surface returns the fold state after the seed (a copy), valid once Finish returned nil: a
// fork's writes after its end-seed marker (edit-then-fork) are checked against it with
// Surface.Apply, the end-seed marker first.
func (s *SeedStream) Surface() *Surface {
	c := s.v.surf.clone()
	return &c
}

// CwdRestorable reports whether dsh can restore a session whose header has this cwd: dsh's
// validateSessionHeader refuses a cwd that is not an absolute path (node:path isAbsolute, POSIX:
// it starts with "/"), such as the "{{cwd}}/workspace" of the recorded sessions. "" (no cwd) is
// restorable.
func CwdRestorable(cwd string) bool { return cwd == "" || cwd[0] == '/' }
