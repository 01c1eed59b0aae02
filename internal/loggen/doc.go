// Package loggen is test-support code for conformance by differential testing against the
// reference session log (npm @deepseek-ai/dsh-session@0.1.0-rc.8, run by
// ../shared/conformance/oracle.mjs).
//
// It has three parts:
//
//   - a generator (Generate, GenerateWith): random dsh JSONL session logs, deterministic in a
//     seed (math/rand/v2 with a PCG source), that look like real agent work: turns and steps,
//     user messages, streamed assistant/chunk deltas (written as packed chunk rows when
//     Log.Pack), assistant messages with tool calls, tool calls and results (some missing),
//     plugin events with and without ignorable, session/end-seed markers, compaction replaces,
//     tool-result prunes, and crash cuts. The reference accepts every generated log.
//   - a corrupter (Corrupt, CorruptKind): breaks a log with exactly one fault and reports which
//     (Fault: kind, variant, seq, line, and the reference's expected outcome). RequiredKinds
//     covers every refusal rule of the reference plus malformed input (seq gaps and repeats,
//     non-JSON values, duplicate keys, numbers beyond float64, -0, invalid UTF-8, blank lines, a
//     truncated last line, legacy request/header-delta); ExtraKinds probe further corners of the
//     reference's reader (odd types, spellings, shapes only a fork's seed check refuses, ...).
//   - a comparator (CompareInspect): the oracle's output object against session.Inspect's, as
//     JSON values with JavaScript semantics.
//
// The comparator is the judge, and a judge must not share code with what it judges: compare.go
// has its own JSON parser and value model and uses neither session nor internal/jsvalue (keep it
// so, even where the code looks alike). The generator and the corrupter only write logs, and use
// internal/jsvalue for that (AppendJSON).
//
// The tests of this package run them: TestDifferential (generated and corrupted logs through the
// oracle once per chunk of logs, compared with session.Inspect; flags -loggen.n, -loggen.seed,
// -loggen.kinds, -loggen.only, -loggen.chunk, -loggen.keep; it skips without node and the oracle
// unless CI=true), TestRegressions (hand-written fixtures in testdata/regress, no node needed),
// TestRoundTrip (ReadJSONL → WriteJSONL plain and packed → ReadJSONL), TestDeriveIncremental and
// BenchmarkDeriveAfterAppend. The oracle directory is $ORACLE_DIR, default /tmp/oracle.
package loggen
