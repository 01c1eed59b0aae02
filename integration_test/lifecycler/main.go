// Command lifecycler is the lifecycle fault tests' process (integration_test builds it and runs
// it beside `agentlog dev`): it archives, restores or removes one session, or runs one lifecycle
// pass, through package store, and kills itself with SIGKILL when the operation reaches the step
// --kill-at names (store.StepHook, store.RemoveStepHook), so that a test can check what a kill -9
// at that point leaves. It is test support, not part of the agentlog binary.
//
// Exit status: 0 when the operation completed (the step was never reached), 1 when it failed,
// 2 on a usage error; killed, the process dies of SIGKILL.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	op := flag.String("op", "", "archive, restore, remove or pass")
	id := flag.String("session", "", "the session (archive, restore, remove)")
	killAt := flag.String("kill-at", "", "the step at which the process kills itself (SIGKILL)")
	skip := flag.Int("skip", 0, "reach the step this many times before the kill (a pass: the n+1-th session)")
	retain := flag.Bool("retain", false, "the pass deletes (retention) instead of archiving")
	flag.Parse()
	if *op == "" || (*op != "pass" && *id == "") {
		fmt.Fprintln(os.Stderr, "lifecycler: --op and --session are required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, js, err := natsdev.Connect(*url, nats.Name("lifecycler"))
	if err != nil {
		fail(err)
	}
	defer nc.Close()
	st, err := store.Open(ctx, js)
	if err != nil {
		fail(err)
	}
	seen := 0
	hook := func(step string) {
		if step == *killAt {
			if seen++; seen > *skip {
				fmt.Println("killed at", step)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	var ss *store.Session
	if *op != "pass" {
		if ss, err = st.Session(*id); err != nil {
			fail(err)
		}
	}
	switch *op {
	case "archive":
		_, err = ss.Archive(ctx, store.StepHook(hook))
	case "restore":
		_, err = ss.Restore(ctx, store.StepHook(hook))
	case "remove":
		_, err = ss.Remove(ctx, store.RemoveStepHook(hook))
	case "pass":
		later := time.Now().Add(72 * time.Hour)
		policy := store.Policy{ArchiveAfter: 24 * time.Hour}
		if *retain {
			policy.RetainFor = 48 * time.Hour
		}
		_, err = st.LifecyclePass(ctx, policy, store.PassOptions{
			Workers: 1, Now: func() time.Time { return later }, StepHook: hook})
	default:
		fmt.Fprintf(os.Stderr, "lifecycler: --op %q: want archive, restore, remove or pass\n", *op)
		os.Exit(2)
	}
	if err != nil {
		fail(err)
	}
	fmt.Println("done")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lifecycler:", err)
	os.Exit(1)
}
