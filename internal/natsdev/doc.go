// Package natsdev runs NATS for development and tests: an embedded single-node nats-server with
// JetStream (RunServer, behind `agentlog dev`, the benchmarks and the tests) and Connect, the
// connection settings agentlog's commands use. Only cmd/, internal/testnats and tests import it, so
// the product's libraries (publisher, jetstream, projector, forker) never link nats-server.
package natsdev
