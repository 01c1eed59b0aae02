// Package forker is the fork service (client.ForkService on client.ForkSubject): it starts a new
// session from a prefix of another, the seed events plus a session/end-seed marker, written as one
// record guarded with expected sequence 0.
//
// In: client.ForkRequest. Out: client.ForkResult. Refusals are *session.ForkError with the
// reference's code and exact text (SESSION_ALREADY_EXISTS, SESSION_NOT_FOUND, INVALID_BOUNDARY,
// OPEN_TURN; INVALID_SEED when the reference has no code); the service also answers 400, 422, 500
// and 503. The order of the checks and why the metadata comes first: ARCHITECTURE.md, "A fork".
package forker
