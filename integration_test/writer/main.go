// Command writer is the fault tests' publisher process (integration_test builds it and runs it
// beside `agentlog dev`): a real publisher that writes the deterministic events of one session and
// reports on stdout what the publisher acknowledged, so that a test can kill it with SIGKILL
// mid-window and check the log afterwards. It is test support, not part of the agentlog binary.
//
// Exit status: 0 when every event was written and the publisher closed, 1 when a write or the
// connection failed (the error on stderr), 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c := newWriterCmd(os.Stdout)
	c.SetArgs(os.Args[1:])
	err := c.ExecuteContext(ctx)
	stop()
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

// usageError marks a command-line mistake (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
