package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// writerOptions are the flags of the writer.
type writerOptions struct {
	NATS       string
	Session    string
	Events     int
	Size       int
	Window     time.Duration
	Batch      int
	FlushEvery int
	Pause      time.Duration
	T0         int64
	WriterID   string
	LeaseTTL   time.Duration
	Takeover   bool
}

// newWriterCmd is the writer's command line; it reports on out.
//
// Protocol (one line each, stdout, flushed as written):
//
//	ready <nextSeq>    the session is created (or already existed and was resumed) and the writer is at nextSeq
//	appended <n>       Append returned for every seq < n (admitted, not yet durable)
//	durable <n>        Flush returned: every seq < n is durable
//	done <n>           Close returned with n events written
//
// The events are loggen.ChunkTurn(0, --events, --size, --t0) (an open turn of assistant/chunk
// events until the last two), so the caller can rebuild them exactly. Only the create-or-resume branch
// differs: when the session already exists it is opened (resume: closers + end-seed) and the
// events continue from its next seq with the same generator's tail shifted to that seq. A session
// whose writer is live is refused unless --takeover.
func newWriterCmd(out io.Writer) *cobra.Command {
	o := writerOptions{}
	c := &cobra.Command{
		Use:           "writer --nats URL --session ID",
		Short:         "A publisher process for the fault tests",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return &usageError{fmt.Errorf("writer takes no arguments (got %d)", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.NATS == "" || o.Session == "" || o.Events < 1 || o.Batch < 1 || o.FlushEvery < 1 {
				return &usageError{errors.New("--nats, --session, --events >= 1, --batch >= 1, --flush-every >= 1 are required")}
			}
			ctx := cmd.Context()
			nc, js, err := natsdev.Connect(o.NATS, nats.Name("agentlog-test-writer"))
			if err != nil {
				return err
			}
			defer nc.Close()
			st, err := store.Open(ctx, js)
			if err != nil {
				return fmt.Errorf("NATS at %s: %w", o.NATS, err)
			}
			events, err := loggen.ChunkTurn(0, o.Events, o.Size, o.T0)
			if err != nil {
				return err
			}
			p, err := publisher.New(st, nc, publisher.Options{Window: o.Window, WriterID: o.WriterID, LeaseTTL: o.LeaseTTL})
			if err != nil {
				return &usageError{err} // --window or --writer-id
			}
			w, err := p.Create(ctx, session.Header{ID: o.Session, CreatedAt: o.T0})
			if errors.Is(err, publisher.ErrSessionExists) {
				var opts []publisher.OpenOption
				if o.Takeover {
					opts = append(opts, publisher.Takeover())
				}
				w, err = p.Open(ctx, o.Session, opts...)
			}
			if err != nil {
				return err
			}
			next := w.NextSeq()
			fmt.Fprintf(out, "ready %d\n", next)
			round := 0
			for i := int(next); i < len(events); {
				for k := 0; k < o.Batch && i < len(events); k, i = k+1, i+1 {
					ev := events[i]
					ev.Seq = int64(i)
					if err := w.Append(ev); err != nil {
						return err
					}
					if o.Pause > 0 {
						time.Sleep(o.Pause)
					}
				}
				fmt.Fprintf(out, "appended %d\n", i)
				round++
				if round%o.FlushEvery == 0 {
					if err := w.Flush(ctx); err != nil {
						return err
					}
					fmt.Fprintf(out, "durable %d\n", i)
				}
			}
			if err := p.Close(ctx); err != nil {
				return err
			}
			fmt.Fprintf(out, "done %d\n", w.DurableSeq())
			return nil
		},
	}
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	c.Flags().StringVar(&o.NATS, "nats", "", "NATS URL of a provisioned agentlog (agentlog dev)")
	c.Flags().StringVar(&o.Session, "session", "", "session id")
	c.Flags().IntVar(&o.Events, "events", 1000, "events to write in total")
	c.Flags().IntVar(&o.Size, "size", 512, "bytes of JSON per event")
	c.Flags().DurationVar(&o.Window, "window", publisher.DefaultWindow, "batching window")
	c.Flags().IntVar(&o.Batch, "batch", 10, "events appended per round")
	c.Flags().IntVar(&o.FlushEvery, "flush-every", 2, "Flush after every this many rounds")
	c.Flags().DurationVar(&o.Pause, "pause", time.Millisecond, "sleep after each Append")
	c.Flags().Int64Var(&o.T0, "t0", 1785000000000, "time of seq 0, Unix ms")
	c.Flags().StringVar(&o.WriterID, "writer-id", "", "publisher WriterID (default a nuid)")
	c.Flags().DurationVar(&o.LeaseTTL, "lease-ttl", publisher.DefaultLeaseTTL, "TTL of the writer's lease on the session (at least 1s)")
	c.Flags().BoolVar(&o.Takeover, "takeover", false, "when resuming an existing session, take it over from a live writer (fencing it)")
	return c
}
