// Package bench measures agentlog against a raw JetStream baseline in the same run, and prints the
// ratio: the publisher against async publishing (RunAppend), a projector's fold against ordered
// consumers and the projection lag under load (RunProject), a fork against reading and
// republishing its bytes (RunFork), the figures at N sessions against 1,000 (RunScale), and the
// peak memory of one big session's import, events and fork (RunMemory). Each Run takes its
// Options, writes progress to a log writer and returns a Result whose JSON is what `agentlog bench
// ... --json` prints; the Print functions write the text form. The servers are embedded
// (internal/devstack), except where a figure needs a process of its own: RunScale runs its server
// as `agentlog bench scale-server` (ScaleServer) and RunMemory runs `agentlog dev`, `import`,
// `events` and `fork` as child processes of a binary.
package bench
