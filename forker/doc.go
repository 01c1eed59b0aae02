// Package forker is the fork service: a NATS micro service that starts a new session from a prefix
// of another (the seed events plus a session/end-seed marker), written as one record guarded with
// expected sequence 0, with the reference's refusal codes and exact texts.
//
// It implements the reference's SessionStore.fork and _forkSeed (@deepseek-ai/dsh-session
// 0.1.0-rc.8): SESSION_ALREADY_EXISTS is checked first, then SESSION_NOT_FOUND, then the boundary
// (INVALID_BOUNDARY, OPEN_TURN, via session.ForkSeed) and the seed (session.ForkChild). The child's
// metadata (agentlog_sessions) is created before its record; Forker documents why.
//
// The service is client.ForkService, endpoint "fork" on client.ForkSubject (queue group "q"). A
// request is client.ForkRequest as JSON; a success is client.ForkResult as JSON. A refusal is a
// micro error whose code is the reference code (OPEN_TURN, INVALID_BOUNDARY, SESSION_NOT_FOUND,
// SESSION_ALREADY_EXISTS, or INVALID_SEED for a seed-validation refusal, which the reference raises
// without a code) and whose description is the exact text; client.Client.Fork returns it as a
// *client.Error. Other codes (client.Code): 400 bad request, 422 unreadable source log, 500 store
// failure, 503 stopping.
package forker
