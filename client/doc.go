// Package client is the Go client of the agentlog services: the query service (derived messages,
// stored surfaces, projection units' views and snapshots of a session) and the fork service.
//
// A Client wraps one *nats.Conn; calls take functional options (MinSeq, Timeout) and return the
// services' wire types, defined here and used by the services too. Error replies are *Error,
// matched by code with errors.Is (ErrNotFound, ErrTimeout, ErrOpenTurn, ...).
//
// Sessions, SessionIDs, Resolve, Status, Lineage (a session's fork tree), Header, LastSeq, Events,
// ErrorReports and WatchMessages read the streams and the KV buckets directly through the
// connection (nats.go jetstream), since no service owns listing yet.
package client
