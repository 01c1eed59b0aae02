// Package store keeps agentlog sessions in NATS JetStream: provisioning (Provision, Open), guarded
// append (Store.Append, Store.BeginAppend), reading a session in order (Store.Read, Store.GetTail),
// session metadata (CreateSession, GetSession), writer leases, events too large for a record
// offloaded to the Object Store bucket agentlog_blobs (Append stores them, every read checks them,
// RemoveSession and CollectBlobs delete them), and removal of a session. What goes on the wire
// (names, tokens, subjects, the record codec) is package wire's.
//
// Errors name the session and carry no package prefix; refusals of a record are *session.Error,
// conditions are sentinels (ErrConflict, ErrSessionNotFound, ErrNotProvisioned, ...) matched with
// errors.Is. The layout and why: ARCHITECTURE.md ("Where state lives", "An append", "Large events").
package store
