// Package loggen tests conformance differentially against the reference (run by
// ../shared/conformance/oracle.mjs, in $ORACLE_DIR, default /tmp/oracle): a generator of random
// realistic session logs (Generate), a corrupter that breaks one with exactly one fault (Corrupt,
// CorruptKind; RequiredKinds covers every refusal rule), and a comparator of the oracle's output
// with session.Inspect's (CompareInspect). ChunkTurn gives the deterministic events of the
// benchmarks (internal/bench) and of the fault tests' writer process.
//
// The comparator is the judge and keeps its own JSON parser and value model (compare.go uses
// neither session nor internal/jsvalue): keep it so, even where the code looks alike.
// TestDifferential runs it (flags -loggen.n, -loggen.seed, -loggen.kinds, -loggen.only,
// -loggen.chunk, -loggen.keep; it skips without node unless CI=true).
package loggen
