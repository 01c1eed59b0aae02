// Package projector folds session logs into projection units, stores their states in the
// agentlog_projections KV bucket, and serves them through the agentlog-query NATS micro service.
// Instances scale out by partition.
//
// # Projection units
//
// A unit is the reference's ProjectionDefinition {key, stateVersion, init, apply, view} plus an
// optional list of the event types it reads (Def[S], registered in a Registry). States are plain
// JSON. Apply returns its input unchanged for events it ignores, and then nothing further happens
// for them (no copy, no re-encoding). Built-in units (Builtins): messages (the surface: nodes,
// replaceGeneration, transcript, openTurn; it is the gate that checks every event against the
// log's rules with session.Surface.Apply before any other unit sees it), transcript, title, todos,
// usage, tools, turns. Fold folds a log through a registry in memory (what a unit gives).
//
// A unit that needs the session's lineage sets Def.InitSession instead of Init: it starts the
// session's state from its header (agentlog_sessions: id, parentSession, seedLength), so that a
// fork's inherited seed (seqs below seedLength) can be told from its own events. usage and turns
// do so (own and inherited figures). FoldSession is Fold with a header.
//
// Each (unit, session) state is stored under "<unit>.<token>" as
// {"stateVersion":N,"asOfSeq":N,"log":{"incarnation":S,"streamSeq":N},"state":...,
// "error"?:{seq,rule,message}} (log: the session's incarnation and the AGENTLOG stream seq of the
// last record folded; a value without it is refolded once), written with a revision
// compare-and-swap (Nats-Expected-Last-Subject-Sequence on the bucket's subject, asynchronously,
// all units of a checkpoint together). Watching the key is the change feed. A stored state of
// another stateVersion is discarded and rebuilt from the log: by the projector when the session
// gets its next record, by the query service when the session is asked for (and written back),
// or for every session by Rebuild (`agentlog rebuild UNIT`).
//
// # Folding
//
// Events at or below a unit's asOfSeq are skipped (idempotent by seq: a redelivered record is
// never applied twice); a record that starts after the lowest asOfSeq + 1 (a gap, a new unit, a
// rebuilt one) re-reads the session from the log. A record that does not decode, or an event the
// gate refuses, stops every unit of that session only (each value gains "error"; later records
// are acknowledged and ignored; the query service answers 409, the log gets an error line naming
// the session, the seq and the rule). An error (or panic) of a unit's own Apply stops that unit
// for that session only. Failures to reach KV or the log are transient: the record is retried in
// order, never skipped.
//
// A state that does not belong to its session's current log is refolded from the whole log,
// logged once (a warning naming the session, the seqs and the cause) and counted
// (Projector.Refolds): a re-created session (another incarnation), a log that ends below the
// state (lost records, a purge), or a record the state claims to have applied that it did not
// fold (a delivered record after the last one folded that holds seqs at or below asOfSeq). The
// projector checks on load and on delivery; the query service checks every state it answers
// from (a minSeq wait included), so it never serves a history of another log.
//
// Session states live in memory in an LRU per partition (Options.CacheSessions in all); an
// evicted session is read back from KV at its next record. Records are checkpointed (states
// written, then the records acknowledged) every Options.FlushInterval (50 ms) or 2000 records.
//
// # Scale-out
//
// Every instance holds a lease, its key in the MembersBucket KV bucket (file storage, max age
// MemberTTL, 3 s, renewed every 0.75 s; the value names the host, pid and partitions it owns). Every MemberTTL/3 an instance
// lists the members and consumes the partitions Assign gives it (members sorted by name,
// partition p to member p mod n). Partition p is read, in stream order, through the durable
// consumer agentlog-projector-<p> (filter agentlog.session.<p>.*, explicit ack, AckWait 4 s), whose
// pinned-client priority group "projector" (PinnedTTL 4 s) lets the server serve one instance
// only, so per-session order holds in delivery. A partition handed over (instance added or
// stopped) is drained, checkpointed, acknowledged and unpinned at once; a killed instance's
// partitions resume on the survivors when its lease expires, measured at about 3.5 s
// (TestKilledInstanceFailsOver). Why pinned priority groups and not orbit.go pcgroups: see
// SCALEOUT.md.
//
// A restart of the server (or of the cluster) is survived: the members bucket, a partition's
// consumer and its pull are created again when lost (pulls that miss heartbeats for 2 s are
// replaced, with backoff up to 2 s), and each failure is logged once until it recovers. An
// instance restarted under its name takes back a lease left by a dead process of its host at
// once, and waits for any other to expire.
//
// # Query service
//
// agentlog-query (client.QueryService, queue group "q") answers client.QueryRequest; with minSeq
// the service waits (watching the messages key, default 5000 ms, at most 60000 ms) until the
// projection has applied that seq (read-your-writes for agents):
//   - messages (client.MessagesSubject): the surface nodes and deriveMessages of them, derived
//     from the session's events read from the log;
//   - surface (client.SurfaceSubject): the stored messages value, error included;
//   - projection (client.ProjectionSubject): one unit's view;
//   - snapshot (client.SnapshotSubject, ReadSnapshot): the views of every unit at one consistent
//     asOfSeq.
//
// Error replies carry micro's error headers with a client.Code (400 bad request, 404 no
// projection or no such unit, 408 minSeq not reached in time, 409 projection stopped, 413 reply
// too large, 500 store failure, 503 stopping or busy) and a description naming the session. The
// Go client is package client.
package projector
