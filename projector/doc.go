// Package projector folds session logs into their projections: it consumes the AGENTLOG stream,
// keeps each session's surface (nodes, replaceGeneration, asOfSeq) and transcript in the
// agentlog_projections KV bucket, idempotent by seq, and serves derived messages through a NATS
// micro query service.
package projector
