// Package session is the pure model of a dsh session log (format version 0), with no NATS: the
// event envelope (Event), JSONL reading and writing (ReadJSONL, WriteJSONL), every refusal rule
// (rules.go), the surface fold (Surface), deriveMessages, fork seeds (ForkSeed, ForkChild),
// crash-repair closers (Repair) and Inspect, the conformance oracle's output.
//
// Refusals are *Error (session, seq, line, Rule); fork refusals are *ForkError with the
// reference's Code; errors.Is matches them by rule or code. The strict path (Session, Load,
// Surface) and Inspect share one implementation: ARCHITECTURE.md says why there are two. The
// reference is @deepseek-ai/dsh-session@0.1.0-rc.8; departures are in DEPARTURES.md.
package session
