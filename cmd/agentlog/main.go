// Command agentlog is the agentlog binary: it runs an embedded nats-server with the agentlog services
// for local use (`agentlog dev`), runs the services against a real NATS cluster (`agentlog
// projector`, `agentlog forker`), and gives operators a CLI over session logs (import, events,
// messages, fork, rm, inspect, provision, demo).
//
// Every command that talks to NATS takes --nats URL (or AGENTLOG_NATS_URL, then NATS_URL; default
// nats://127.0.0.1:4222) and the credentials and TLS of connopts.go (--creds, --nkey, --user and
// --password, --token, --tls-ca, --tls-cert, --tls-key, or their AGENTLOG_NATS_* and NATS_*
// variables). Exit status: 0 on success, 1 when the operation was refused or failed (the reason is
// on stderr), 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Traces: off unless OTEL_TRACES_EXPORTER names an exporter (deploy/README.md, "Traces").
	shutdown, err := setupTraces(ctx, traceServiceName(os.Args[1:]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentlog:", err)
		os.Exit(2)
	}
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := shutdown(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "agentlog: traces: flushing the last spans:", err)
	}
	cancel()
	os.Exit(code)
}

// traceServiceName is the default service.name of the process's traces (OTEL_SERVICE_NAME
// overrides it): agentlog-<command> for the commands that run services, else agentlog.
func traceServiceName(args []string) string {
	for _, a := range args {
		switch a {
		case "dev", "projector", "forker":
			return "agentlog-" + a
		}
	}
	return "agentlog"
}

// exitError carries a process exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// run executes the CLI with args and returns the process exit status. It is the testable entry point.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root, g := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if r := g.refusal(); r != nil && !errors.Is(err, r) {
		if errors.Is(err, context.Canceled) {
			err = r // the command was stopped by the server's refusal, which says more than "canceled"
		} else {
			err = fmt.Errorf("%w; %v", err, r) // it failed on its own: that first, the refusal as detail
		}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "agentlog:", withHint(ee.err))
		}
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command ") {
		fmt.Fprintln(stderr, "agentlog:", err)
		return 2
	}
	fmt.Fprintln(stderr, "agentlog:", withHint(err))
	return 1
}

// usageError marks a command-line mistake (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
