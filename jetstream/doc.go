// Package jetstream maps agentlog sessions onto NATS JetStream: idempotent provisioning of the
// AGENTLOG stream, the agentlog_sessions and agentlog_projections KV buckets and the AGENTLOG_ERRORS
// stream; the injective mapping from session id to subject token; the record codec (one JetStream
// message carries 1..K consecutive events of one session); guarded append with
// Nats-Expected-Last-Subject-Sequence; and reading a session's events in order.
package jetstream
