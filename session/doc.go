// Package session is agentlog's pure core: the dsh session-log model (format version 0) with no
// NATS dependency.
//
// It holds the event envelope (Event, with data kept as raw JSON bytes), the dsh JSONL reader and
// writer (ReadJSONL, WriteJSONL: header line, events, packed chunk rows), validation of every
// refusal rule of the reference (seq contiguity, lossless JSON, legacy request headers, the surface
// rules), the surface fold (Surface: nodes, replaceGeneration, transcript, open
// turn), the cached deriveMessages (Session.DeriveMessages, and DeriveMessages for callers holding
// only a stored Surface), fork-seed selection and seed validation with the reference's codes and
// exact texts (ForkSeed, ForkChild, EndSeed), the crash-repair closers (Repair), and Inspect, which
// reproduces the conformance oracle's output object.
//
// Refusals are *Error values naming the session, the seq and the Rule (rules.go lists every rule
// of agentlog, the record and projection rules included); fork refusals are *ForkError with the
// reference's Code. errors.Is matches either by rule or code. JavaScript semantics (JSON.parse,
// property access, String(x), JSON.stringify) come from internal/jsvalue.
//
// Two paths share one implementation. The public path (Session, Load, Surface) refuses, with an
// *Error naming the session, the seq and the rule, every event the reference refuses at append,
// and also the events the reference accepts but later cannot derive or repair (rule event-shape),
// so that a projector never fails half-way through a fold. Inspect follows the reference step by
// step instead, including where it fails late.
//
// The reference is the npm package @deepseek-ai/dsh-session@0.1.0-rc.8, run by
// ../shared/conformance/oracle.mjs; where this package and the oracle disagree, the oracle wins,
// except for the documented departures in DEPARTURES.md.
package session
