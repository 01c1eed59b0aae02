// Package projector folds session logs into projection units (Def, Registry, Builtins), keeps
// their states in the agentlog_projections KV bucket, and serves them through the agentlog-query
// micro service; instances divide the stream's partitions among themselves.
//
// In: the AGENTLOG stream (records), the sessions' headers (for units with Def.InitSession) and a
// Registry. Out: stored states ({stateVersion, asOfSeq, log, state, error?} under "<unit>.<token>"),
// query replies (package client's wire types), and Fold, FoldSession and ReadSnapshot in process.
// A session whose log breaks a rule stops with a *session.Error; query errors carry a client.Code.
// How a fold, a checkpoint, the scale-out and a query work, and why: ARCHITECTURE.md ("A fold",
// "A query") and projector/SCALEOUT.md.
package projector
