// Package publisher is the library agents use to create or resume sessions (Publisher.Create,
// Publisher.Open) and append events (Writer.Append, Writer.Emit) in a 200 ms batching window;
// Writer.Flush returns once the events are durable.
//
// Append refuses an invalid event at once with a *session.Error. A failed write is a *WriteError
// on Writer.Errors and from Flush/Close, and its events stay pending; another writer's append
// fences this one (ErrConflict, then ErrFenced). A failure is never written into the log. Each
// Writer holds a lease on its session (Options.LeaseTTL): Open of a session whose writer is alive
// is a *LiveError unless Takeover(); acknowledged events missing from the log are an
// *AckedLostError (ErrAckedLost). How an append flows and why: ARCHITECTURE.md, "An append".
package publisher
