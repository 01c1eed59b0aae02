// Package publisher is the library agents use to create sessions and append events to them.
//
// It validates each event synchronously at Append, batches a session's events in a fixed window
// (200 ms by default), writes each batch as one guarded record, returns from Flush only once the
// events are durable, fences off concurrent writers with the Nats-Expected-Last-Subject-Sequence
// guard, and on failure keeps the events pending and reports the error on a channel. It never
// writes a failure into the log. Each Writer holds a lease on its session (KV agentlog_writers, TTL
// Options.LeaseTTL) so that Open refuses a session whose writer is alive, and it checks the stored
// tail against what it acknowledged after a reconnect and on every conflict (ErrAckedLost).
package publisher
