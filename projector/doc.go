// Package projector folds session logs into their projections: it consumes the AGENTLOG stream,
// keeps each session's surface (nodes, replaceGeneration, asOfSeq) and transcript in the
// agentlog_projections KV bucket, idempotent by seq, and serves derived messages through a NATS
// micro query service.
//
// # Folding
//
// A Projector reads the stream with the durable pull consumer agentlog-projector (filter
// agentlog.session.>, explicit ack, DeliverAll) and folds one record at a time, in stream order.
// For each record it decodes the events (jetstream.DecodeRecord), loads the session's projection
// from key "messages.<token>" ({"stateVersion":1,"asOfSeq":N,"state":{nodes, replaceGeneration,
// transcript, openTurn}}), skips the events at or below asOfSeq, re-reads the session from the log
// when the record starts after asOfSeq+1 (a gap), applies the rest with session.Surface.Apply and
// writes the result back with a revision compare-and-swap (KV create for a new key, update with the
// revision read; on a conflict it reloads and folds again). A redelivered record is therefore
// never applied twice, and an unchanged projection is not rewritten.
//
// A session whose log breaks a rule (a record that does not decode, or an event that Surface.Apply
// refuses) stops only its own projection: the value keeps the state as of the last good event and
// gains "error":{"seq","rule","message"}; later records of the session are acknowledged and
// ignored. Failures to reach the KV bucket or the log are transient: the record is redelivered.
//
// # Query service
//
// The agentlog-query micro service (queue group "q") has two endpoints. Requests are
// {"session": id, "minSeq"?: seq, "timeoutMs"?: ms}; with minSeq the service waits (watching the
// KV key, default 5000 ms) until asOfSeq >= minSeq.
//   - messages (MessagesSubject): MessagesReply, the stored nodes and their messages derived
//     (session.DeriveMessages) from the session's events read from the log; the log is not refolded.
//   - surface (SurfaceSubject): the stored Projection JSON, error included.
//
// Error replies carry micro's error headers with a code (400 bad request, 404 no projection,
// 408 minSeq not reached in time, 409 projection stopped, 500 store failure, 503 stopping) and a
// description naming the session. QueryMessages and QuerySurface are the clients; they return
// *QueryError for an error reply.
//
// Deployment note: all instances share one durable consumer. With one instance, per-session
// delivery order holds; with more, folding stays correct (compare-and-swap, skip by seq, gap
// re-read) but does more work. Partitioned consumption (design.md §4) is not implemented here.
package projector
