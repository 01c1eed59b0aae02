package projector_test

import (
	"encoding/json"
	"fmt"

	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
)

// A user projection unit: it counts the tool calls of a session by name of the tool. Register it
// next to the built-ins and give the registry to the projector:
//
//	reg, err := projector.NewRegistry(toolNames)
//	...
//	p, err := projector.New(store, nc, projector.Options{Registry: reg})
//
// Its state is stored in agentlog_projections under "toolnames.<token>", and
// client.Client.Projection(ctx, id, "toolnames") returns its view. Bump StateVersion
// when the state shape or the fold changes: stored states are then rebuilt from the log.
func Example_userUnit() {
	toolNames := projector.Def[map[string]int]{
		Key:          "toolnames",
		StateVersion: 1,
		Reads:        []string{"tool/call"}, // Apply sees only these events
		Init:         func() map[string]int { return map[string]int{} },
		Apply: func(s map[string]int, ev session.Event) (map[string]int, error) {
			var d struct{ Name string }
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				return s, err // stops this unit for this session, with a clear error
			}
			next := map[string]int{d.Name: 1} // never modify the input state in place
			for k, v := range s {
				next[k] += v
			}
			return next, nil
		},
	}
	reg, err := projector.NewRegistry(toolNames)
	if err != nil {
		panic(err)
	}

	// What the unit gives for a session, folded in memory (a projector stores the same).
	events := []session.Event{
		{Type: "turn/start", Seq: 0, Time: "1785000000000", Data: json.RawMessage(`{"turn":1}`)},
		{Type: "tool/call", Seq: 1, Time: "1785000000001", Data: json.RawMessage(`{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`)},
		{Type: "tool/call", Seq: 2, Time: "1785000000002", Data: json.RawMessage(`{"turn":1,"step":1,"callId":"c2","name":"ls","arguments":"{}"}`)},
	}
	snap, err := projector.Fold(reg, "demo", events)
	if err != nil {
		panic(err)
	}
	u := snap.Units["toolnames"]
	fmt.Println(u.AsOfSeq, string(u.View))
	fmt.Println(reg.Keys())
	// Output:
	// 2 {"ls":2}
	// [messages transcript title todos usage tools turns toolnames]
}

// A unit that reads the session header: InitSession starts the state of each session from its
// header (from agentlog_sessions), here to count only the tool calls a fork made itself, not
// those it inherited with its seed (seqs below seedLength).
func Example_lineageUnit() {
	type ownCalls struct {
		SeedLength int64 `json:"seedLength"`
		Calls      int   `json:"calls"`
	}
	own := projector.Def[ownCalls]{
		Key:          "owncalls",
		StateVersion: 1,
		Reads:        []string{"tool/call"},
		InitSession: func(h session.Header) ownCalls {
			if h.SeedLength != nil {
				return ownCalls{SeedLength: *h.SeedLength} // kept in the state: stored states are decoded, not started again
			}
			return ownCalls{}
		},
		Apply: func(s ownCalls, ev session.Event) (ownCalls, error) {
			if ev.Seq < s.SeedLength {
				return s, nil // inherited
			}
			s.Calls++
			return s, nil
		},
	}
	reg, err := projector.NewRegistry(own)
	if err != nil {
		panic(err)
	}
	seed := int64(2) // a fork: seqs 0..1 copied from its parent, session/end-seed at seq 2
	events := []session.Event{
		{Type: "turn/start", Seq: 0, Time: "1785000000000", Data: json.RawMessage(`{"turn":1}`)},
		{Type: "tool/call", Seq: 1, Time: "1785000000001", Data: json.RawMessage(`{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`)},
		{Type: "session/end-seed", Seq: 2, Time: "1785000000002", Data: json.RawMessage(`{}`)},
		{Type: "tool/call", Seq: 3, Time: "1785000000003", Data: json.RawMessage(`{"turn":1,"step":1,"callId":"c2","name":"ls","arguments":"{}"}`)},
	}
	snap, err := projector.FoldSession(reg, session.Header{ID: "child", ParentSession: "parent", SeedLength: &seed}, events)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(snap.Units["owncalls"].View))
	// Output:
	// {"seedLength":2,"calls":1}
}
