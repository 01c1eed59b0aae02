package projector

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// dshDir holds the real recorded sessions and the oracle's output for each (X.expected.json).
const dshDir = "../../shared/data/dsh-sessions"

// TestRealSessionsMatchReference projects every recorded session that the reader can load, all
// interleaved on one stream, and compares the query service's answer with the reference's
// (oracle.mjs): nodes, replaceGeneration and messages for accepted logs; a stopped projection
// (409) at the refused event for refused ones.
func TestRealSessionsMatchReference(t *testing.T) {
	e := newEnv(t)
	checkRealSessions(t, e)
}

// TestRealSessionsOffloadedMatchReference is TestRealSessionsMatchReference with records of at
// most 1 KiB, so that every event of more than about 700 bytes is offloaded to agentlog_blobs,
// and a server max payload of 16 KiB, so that the larger tool results' messages fit in no reply
// and the client derives them from the log (client.ExternalMessage): the query service's messages
// still equal the reference's for the same logs.
func TestRealSessionsOffloadedMatchReference(t *testing.T) {
	te := testnats.StartWith(t, natsdev.ServerOptions{MaxPayload: 16 << 10}, store.Config{Partitions: 4, MaxMsgSize: 1024})
	e := &env{t: t, url: te.URL, nc: te.NC, store: te.Store, tails: map[string]uint64{}}
	largest := checkRealSessions(t, e)
	objs := storetest.Blobs(e.store)
	if len(objs) < 100 {
		t.Fatalf("%d events offloaded, want many", len(objs))
	}
	if largest <= 16<<10 {
		t.Fatalf("the largest message is %d bytes: none was larger than a reply", largest)
	}
	t.Logf("%d events offloaded; the largest message, %d bytes, was larger than a reply", len(objs), largest)
}

// checkRealSessions is TestRealSessionsMatchReference on e; it returns the size of the largest
// message compared, in bytes.
func checkRealSessions(t *testing.T, e *env) int {
	files := sessiontest.RecordedLogs(t, dshDir)
	e.startProjector("p1")

	type want struct {
		id        string
		exp       session.InspectResult
		n         int
		refusedAt int64
	}
	var wants []want
	pending := map[string][]session.Event{}
	raws := map[string][]byte{}
	for _, rec := range files {
		f := rec.Path
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var exp session.InspectResult
		expRaw, err := os.ReadFile(rec.Expected)
		if err != nil {
			t.Fatalf("%s: no oracle output: %v", f, err)
		}
		if err := json.Unmarshal(expRaw, &exp); err != nil {
			t.Fatalf("%s: oracle output: %v", f, err)
		}
		id := rec.Name
		raws[id] = raw
		_, events, err := session.ReadJSONL(bytes.NewReader(raw), id)
		if err != nil || len(events) == 0 {
			if exp.OK {
				t.Fatalf("%s: the reference accepts it but ReadJSONL refuses it: %v", f, err)
			}
			continue // an old-format log the reader refuses: nothing to project
		}
		// The seq at which our fold refuses the log (-1: accepted). The reference refuses some
		// logs only in deriveMessages, after accepting every event; session's strict Apply
		// refuses the event that cannot be derived (rule event-shape, session/DEPARTURES.md),
		// so the projection must stop where session.Load stops.
		refusedAt := int64(-1)
		if _, lerr := session.Load(id, events); lerr != nil {
			var se *session.Error
			if !errors.As(lerr, &se) {
				t.Fatalf("%s: Load: %v", f, lerr)
			}
			refusedAt = se.Seq
		}
		if (refusedAt >= 0) == exp.OK {
			t.Fatalf("%s: session.Load refuses at seq %d, the reference says ok=%v (%s)", f, refusedAt, exp.OK, exp.Error)
		}
		e.create(id)
		pending[id] = events
		wants = append(wants, want{id: id, exp: exp, n: len(events), refusedAt: refusedAt})
	}
	// Interleave the sessions' records on the stream: round-robin, records of 1..7 events.
	size := map[string]int{}
	for len(pending) > 0 {
		for _, w := range wants {
			evs, ok := pending[w.id]
			if !ok {
				continue
			}
			k := min(size[w.id]%7+1, len(evs))
			size[w.id]++
			e.appendRecord(w.id, evs[:k])
			if k == len(evs) {
				delete(pending, w.id)
			} else {
				pending[w.id] = evs[k:]
			}
		}
	}
	checked, largest := 0, 0
	for _, w := range wants {
		if !w.exp.OK {
			p := e.waitStored(w.id, func(p Projection) bool { return p.Error != nil })
			if p.Error.Seq != w.refusedAt || p.AsOfSeq != w.refusedAt-1 {
				t.Errorf("%s: projection stopped at seq %d asOfSeq %d (%s), session.Load at seq %d (reference: %s)", w.id, p.Error.Seq, p.AsOfSeq, p.Error.Message, w.refusedAt, w.exp.Error)
			}
			_, err := queryMessages(ctx(t), e.nc, w.id, -1)
			queryErr(t, err, client.CodeStopped, w.id)
			checked++
			continue
		}
		r, err := queryMessages(ctx(t), e.nc, w.id, int64(w.n-1))
		if err != nil {
			t.Errorf("%s: %v", w.id, err)
			continue
		}
		if int64s(r.Nodes) != int64s(w.exp.Nodes) || w.exp.ReplaceGeneration == nil || r.ReplaceGeneration != *w.exp.ReplaceGeneration {
			t.Errorf("%s: nodes %s generation %d, reference %s %v", w.id, int64s(r.Nodes), r.ReplaceGeneration, int64s(w.exp.Nodes), w.exp.ReplaceGeneration)
			continue
		}
		if len(r.Messages) != len(w.exp.Messages) {
			t.Errorf("%s: %d messages, reference %d", w.id, len(r.Messages), len(w.exp.Messages))
			continue
		}
		for i := range r.Messages {
			largest = max(largest, len(r.Messages[i]))
			if !jsonEqual(r.Messages[i], w.exp.Messages[i]) {
				t.Errorf("%s: message %d differs:\n got %s\nwant %s", w.id, i, r.Messages[i], w.exp.Messages[i])
				break
			}
		}
		p, _ := e.stored(w.id)
		if int64s(p.State.Transcript) != int64s(w.exp.Transcript) {
			t.Errorf("%s: transcript %s, reference %s", w.id, int64s(p.State.Transcript), int64s(w.exp.Transcript))
		}
		if (p.State.OpenTurn == nil) != (w.exp.OpenTurn == nil) || (p.State.OpenTurn != nil && *p.State.OpenTurn != *w.exp.OpenTurn) {
			t.Errorf("%s: openTurn %v, reference %v", w.id, p.State.OpenTurn, w.exp.OpenTurn)
		}
		checked++
	}
	// Every unit's view, as the snapshot endpoint serves it, equals what the unit's definition
	// gives for the session's events (Fold), at the same asOfSeq.
	reg, _ := NewRegistry()
	for _, w := range wants {
		_, events, _ := session.ReadJSONL(bytes.NewReader(raws[w.id]), w.id)
		want, err := Fold(reg, w.id, events)
		if err != nil {
			t.Fatalf("%s: Fold: %v", w.id, err)
		}
		got, err := querySnapshot(ctx(t), e.nc, w.id, -1)
		if err != nil {
			t.Errorf("%s: snapshot: %v", w.id, err)
			continue
		}
		if len(got.Units) != 7 {
			t.Errorf("%s: snapshot has %d units", w.id, len(got.Units))
		}
		for k, wu := range want.Units {
			gu := got.Units[k]
			if !jsonEqual(gu.View, wu.View) || gu.AsOfSeq != wu.AsOfSeq || (gu.Error == nil) != (wu.Error == nil) {
				t.Errorf("%s: unit %s: got asOfSeq %d view %s error %+v\nwant asOfSeq %d view %s error %+v", w.id, k, gu.AsOfSeq, gu.View, gu.Error, wu.AsOfSeq, wu.View, wu.Error)
			}
		}
		if w.exp.OK && string(want.Units[UnitTranscript].View) != `{"seqs":`+int64s(w.exp.Transcript)+`}` {
			t.Errorf("%s: transcript unit %s, reference %s", w.id, want.Units[UnitTranscript].View, int64s(w.exp.Transcript))
		}
	}
	if checked == 0 {
		t.Fatal("no session was checked")
	}
	t.Logf("%d recorded sessions projected and checked against the reference", checked)
	return largest
}

// jsonEqual compares two JSON values semantically (object key order aside).
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
