// Package forker is the fork service: a NATS micro service that starts a new session from a prefix
// of another (the seed events plus a session/end-seed marker), written as one record guarded with
// expected sequence 0, with the reference's refusal codes and exact texts.
package forker
