// Package session is agentlog's pure core: the dsh session-log model (format version 0) with no
// NATS dependency.
//
// It holds the event envelope, the dsh JSONL reader and writer (header line, events, packed chunk
// rows), validation of every refusal rule of the reference (VOCABULARY.md), the surface fold
// (nodes, replaceGeneration), the cached deriveMessages, the transcript, the open turn, fork-seed
// selection with the reference's codes and exact texts, and the crash-repair closers.
//
// The reference is the npm package @deepseek-ai/dsh-session@0.1.0-rc.8, run by
// ../shared/conformance/oracle.mjs; where this package and the oracle disagree, the oracle wins,
// except for the documented departures in DEPARTURES.md.
package session
