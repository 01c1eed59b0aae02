// Package store keeps agentlog sessions in NATS JetStream: provisioning (Provision, Open), and,
// through a session's handle (Store.Session), guarded append (Session.Append, BeginAppend),
// reading its records in order (Session.Records, Tail), its metadata (Store.CreateSession,
// Session.Info), its writer lease, its projection states, and its removal (Session.Remove). Events
// too large for a record are offloaded to the write-once stream AGENTLOG_BLOBS (Append stores
// them, every read checks them, Remove and Store.CollectBlobs purge them; legacy ones of the
// Object Store bucket agentlog_blobs are read by direct gets). What goes on the wire
// (names, tokens, subjects, the record codec) is package wire's.
//
// Errors name the session and carry no package prefix; refusals of a record are *session.Error,
// conditions are sentinels (ErrConflict, ErrSessionNotFound, ErrNotProvisioned, ...) matched with
// errors.Is, and JetStream's own refusals are classified by IsWrongLastSequence. The layout and
// why: ARCHITECTURE.md ("Where state lives", "An append", "Large events").
package store
