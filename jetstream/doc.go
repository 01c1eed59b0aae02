// Package jetstream maps agentlog sessions onto NATS JetStream: provisioning (Provision, Open),
// the session id to subject token mapping (Token, Partition), the record codec (EncodeRecord,
// DecodeRecord), guarded append (Store.Append) and reading a session in order (Store.Read,
// Store.GetTail), session metadata (CreateSession, GetSession), and events too large for a record,
// offloaded to the Object Store bucket agentlog_blobs (Store.Append stores them, every read checks
// them, RemoveSession and CollectBlobs delete them).
//
// Errors name the session and carry no package prefix; refusals of a record are *session.Error,
// conditions are sentinels (ErrConflict, ErrSessionNotFound, ErrNotProvisioned, ...) matched with
// errors.Is. The layout and why: ARCHITECTURE.md ("Where state lives", "An append", "Large events").
package jetstream
