// Package devstack runs agentlog's development stack in one process: an embedded nats-server
// (internal/natsdev) with the stream and buckets provisioned, N projectors, M forkers and, when
// asked, the web inspector. `agentlog dev`, `agentlog demo`, the benchmarks and the tests all start
// it with Start and stop it with Close. StartUI serves the inspector on any connection (`agentlog
// ui`).
package devstack
