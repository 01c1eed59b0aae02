package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// ForkOptions are the flags of `agentlog bench fork`.
type ForkOptions struct {
	Events       int
	Size         int
	RecordEvents int
	Source       string // "chunks" or "generated"
	Rounds       int
	JSON         bool
	DataDir      string
	CPUProfile   string
}

// ForkResult is the JSON line of `agentlog bench fork --json`. Durations are ms, sizes bytes.
type ForkResult struct {
	Events        int    `json:"events"`
	Source        string `json:"source"`
	SourceBytes   uint64 `json:"source_bytes"`   // stored bytes of the source's records
	SourceRecords int    `json:"source_records"` // records of the source
	ChildRecords  int    `json:"child_records"`  // records of a child
	GOMAXPROCS    int    `json:"gomaxprocs"`

	ForkMs     float64 `json:"fork_ms"`     // median round: client.Fork against the forker service
	BaselineMs float64 `json:"baseline_ms"` // median round: read the subject, publish the same bytes
	Ratio      float64 `json:"ratio"`       // fork_ms / baseline_ms (target <= 1.5)

	// CPU time of this whole process (server, forker and client) during the median round of
	// each, and their ratio: less sensitive than wall time to other load on a shared machine.
	ForkCPUMs     float64 `json:"fork_cpu_ms"`
	BaselineCPUMs float64 `json:"baseline_cpu_ms"`
	CPURatio      float64 `json:"cpu_ratio"`

	// BatchBaselineMs is the baseline writing the same records as one ADR-50 atomic batch (as a
	// fork of more than one record does), and BatchCost its time against the baseline's: what
	// staging the batch costs the server.
	BatchBaselineMs  float64   `json:"batch_baseline_ms"`
	BatchCost        float64   `json:"batch_cost"`
	RoundsForkMs     []float64 `json:"rounds_fork_ms"`
	RoundsBaselineMs []float64 `json:"rounds_baseline_ms"`
	// Growth of this process's peak RSS (the server, the forker and the client all run in it)
	// during one fork, over its RSS before: VmHWM reset through /proc/self/clear_refs. -1 when
	// the kernel does not offer it.
	ForkPeakRSSGrowthBytes     int64 `json:"fork_peak_rss_growth_bytes"`
	BaselinePeakRSSGrowthBytes int64 `json:"baseline_peak_rss_growth_bytes"`
}

// PrintFork writes res as one JSON line (asJSON) or as text.
func PrintFork(w io.Writer, asJSON bool, res ForkResult) error {
	if asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	_, err := fmt.Fprintf(w, `agentlog bench fork: %d events (%s, %d bytes in %d records), child %d records, GOMAXPROCS %d
  fork:      %8.1f ms  (CPU %.1f ms; peak RSS +%d bytes)
  raw copy:  %8.1f ms  (CPU %.1f ms; peak RSS +%d bytes)
  ratio:     %8.2f  (CPU %.2f)
`, res.Events, res.Source, res.SourceBytes, res.SourceRecords, res.ChildRecords, res.GOMAXPROCS,
		res.ForkMs, res.ForkCPUMs, res.ForkPeakRSSGrowthBytes, res.BaselineMs, res.BaselineCPUMs, res.BaselinePeakRSSGrowthBytes, res.Ratio, res.CPURatio)
	return err
}

// benchForkSource returns the source's events.
func benchForkSource(o ForkOptions) ([]session.Event, error) {
	t0 := time.Now().UnixMilli()
	if o.Source == "chunks" {
		return loggen.ChunkTurn(1, o.Events, o.Size, t0)
	}
	l := loggen.GenerateWith(1, loggen.Options{MaxTurns: max(o.Events/20, 1), MaxEvents: o.Events, Steady: true})
	_, evs, err := session.ReadJSONL(bytes.NewReader(l.JSONL()), "bench-src")
	return evs, err
}

// RunFork measures (b) reading a session's subject and publishing the same bytes once and (a) a
// fork of it through a forker service, o.Rounds times each, on one embedded server, and returns
// the medians and their ratio; progress goes to logw.
func RunFork(ctx context.Context, o ForkOptions, logw io.Writer) (ForkResult, error) {
	res := ForkResult{Source: o.Source, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	dir := o.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "agentlog-bench-fork-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	nc, st, stop, err := benchServer(ctx, devstack.Options{DataDir: dir, Name: "agentlog-bench"})
	if err != nil {
		return res, err
	}
	defer stop()
	events, err := benchForkSource(o)
	if err != nil {
		return res, err
	}
	res.Events = len(events)
	const src = "bench-src"
	fmt.Fprintf(logw, "bench: storing the source (%d events)...\n", len(events))
	if err := st.CreateSession(ctx, session.Header{ID: src, CreatedAt: time.Now().UnixMilli()}); err != nil {
		return res, err
	}
	var last uint64
	before, err := st.Stream().Info(ctx)
	if err != nil {
		return res, err
	}
	srcSession, err := st.Session(src)
	if err != nil {
		return res, err
	}
	for i := 0; i < len(events); i += o.RecordEvents {
		r, err := srcSession.Append(ctx, last, events[i:min(i+o.RecordEvents, len(events))])
		if err != nil {
			return res, fmt.Errorf("storing the source: %w", err)
		}
		last = r.StreamSeq
		res.SourceRecords++
	}
	after, err := st.Stream().Info(ctx)
	if err != nil {
		return res, err
	}
	res.SourceBytes = after.State.Bytes - before.State.Bytes
	events = nil

	f, err := forker.New(st, nc, forker.Options{Logger: benchLogger})
	if err != nil {
		return res, err
	}
	if err := f.Start(ctx); err != nil {
		return res, err
	}
	defer f.Stop()
	cl, err := client.New(nc)
	if err != nil {
		return res, err
	}
	res.ForkPeakRSSGrowthBytes, res.BaselinePeakRSSGrowthBytes = -1, -1
	var forks, bases, batches, forkCPU, baseCPU []float64
	// Both phases of every round: the profile's stacks tell them apart (forker.(*Forker).serve,
	// bench.benchRawCopy and the server goroutines they drive).
	stopProfile, err := startCPUProfile(o.CPUProfile)
	if err != nil {
		return res, err
	}
	defer stopProfile()
	for r := range o.Rounds {
		fmt.Fprintf(logw, "bench: round %d/%d: (b) read and publish the same bytes...\n", r+1, o.Rounds)
		debug.FreeOSMemory() // so that the peak RSS counts what the phase needs, not free heap
		rss0, reset := resetPeakRSS()
		t, c := time.Now(), processCPU()
		if err := benchRawCopy(ctx, st, src, "bench-raw-"+strconv.Itoa(r)); err != nil {
			return res, fmt.Errorf("baseline: %w", err)
		}
		bases, baseCPU = append(bases, ms(time.Since(t))), append(baseCPU, ms(processCPU()-c))
		if reset && r == 0 {
			res.BaselinePeakRSSGrowthBytes = peakRSS() - rss0
		}
		t = time.Now()
		if err := benchRawBatch(ctx, st, src, "bench-batch-"+strconv.Itoa(r)); err != nil {
			return res, fmt.Errorf("batch baseline: %w", err)
		}
		batches = append(batches, ms(time.Since(t)))

		fmt.Fprintf(logw, "bench: round %d/%d: (a) fork...\n", r+1, o.Rounds)
		debug.FreeOSMemory()
		rss0, reset = resetPeakRSS()
		t, c = time.Now(), processCPU()
		fr, err := cl.Fork(ctx, client.ForkRequest{Source: src, Child: "bench-child-" + strconv.Itoa(r)})
		el, elCPU := time.Since(t), processCPU()-c
		if err != nil {
			return res, fmt.Errorf("fork: %w", err)
		}
		forks, forkCPU = append(forks, ms(el)), append(forkCPU, ms(elCPU))
		if reset && r == 0 {
			res.ForkPeakRSSGrowthBytes = peakRSS() - rss0
		}
		if r == 0 {
			child, err := st.Session(fr.Child)
			if err != nil {
				return res, err
			}
			n, err := child.Records(ctx, func(store.Record) error { res.ChildRecords++; return nil })
			if err != nil || n == 0 {
				return res, fmt.Errorf("reading the child back: %v", err)
			}
		}
	}
	res.RoundsForkMs, res.RoundsBaselineMs = slices.Sorted(slices.Values(forks)), slices.Sorted(slices.Values(bases))
	res.ForkMs, res.BaselineMs = res.RoundsForkMs[len(forks)/2], res.RoundsBaselineMs[len(bases)/2]
	res.Ratio = round2(res.ForkMs / res.BaselineMs)
	slices.Sort(batches)
	res.BatchBaselineMs = batches[len(batches)/2]
	res.BatchCost = round2(res.BatchBaselineMs / res.BaselineMs)
	slices.Sort(forkCPU)
	slices.Sort(baseCPU)
	res.ForkCPUMs, res.BaselineCPUMs = forkCPU[len(forkCPU)/2], baseCPU[len(baseCPU)/2]
	res.CPURatio = round2(res.ForkCPUMs / res.BaselineCPUMs)
	return res, nil
}

// benchRawCopy is the fork's raw work: read every record of session src with an ordered consumer
// and publish its bytes (data and Agentlog-* headers) once to the subject of session dst, async,
// then wait for every ack.
func benchRawCopy(ctx context.Context, st *store.Store, src, dst string) error {
	subject, err := wire.SessionSubject(src, st.Partitions())
	if err != nil {
		return err
	}
	to, err := wire.SessionSubject(dst, st.Partitions())
	if err != nil {
		return err
	}
	cons, err := st.Stream().OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return err
	}
	iter, err := cons.Messages(natsjs.PullMaxMessagesWithBytesLimit(256, 4*int(st.MaxMsgSize())))
	if err != nil {
		return err
	}
	defer iter.Stop()
	js := st.JetStream()
	for {
		m, err := iter.Next(natsjs.NextContext(ctx))
		if err != nil {
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		h := nats.Header{}
		for k, v := range m.Headers() {
			if strings.HasPrefix(k, "Agentlog-") {
				h[k] = v
			}
		}
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: to, Header: h, Data: m.Data()}); err != nil {
			return err
		}
		if meta.NumPending == 0 {
			break
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// benchRawBatch is benchRawCopy publishing the records as one ADR-50 atomic batch (the first
// guarded with expected last subject sequence 0), as a fork's seed of several records is written.
func benchRawBatch(ctx context.Context, st *store.Store, src, dst string) error {
	subject, err := wire.SessionSubject(src, st.Partitions())
	if err != nil {
		return err
	}
	to, err := wire.SessionSubject(dst, st.Partitions())
	if err != nil {
		return err
	}
	cons, err := st.Stream().OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return err
	}
	iter, err := cons.Messages(natsjs.PullMaxMessagesWithBytesLimit(256, 4*int(st.MaxMsgSize())))
	if err != nil {
		return err
	}
	defer iter.Stop()
	bp, err := jetstreamext.NewBatchPublisher(st.JetStream(), jetstreamext.BatchFlowControl{AckFirst: true, AckEvery: 10, AckTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	for first := true; ; first = false {
		m, err := iter.Next(natsjs.NextContext(ctx))
		if err != nil {
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		h := nats.Header{}
		for k, v := range m.Headers() {
			if strings.HasPrefix(k, "Agentlog-") {
				h[k] = v
			}
		}
		if first {
			h.Set(natsjs.ExpectedLastSubjSeqHeader, "0")
		}
		msg := &nats.Msg{Subject: to, Header: h, Data: m.Data()}
		if meta.NumPending == 0 {
			_, err := bp.CommitMsg(ctx, msg)
			return err
		}
		if err := bp.AddMsg(msg); err != nil {
			return err
		}
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetPeakRSS resets this process's peak RSS (VmHWM) to its current RSS, which it returns (bytes);
// ok is false where /proc/self/clear_refs is not available.
func resetPeakRSS() (rss int64, ok bool) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, false
	}
	return procRSS(os.Getpid()), true
}

// peakRSS is this process's peak RSS since the last reset (bytes; 0 when unknown).
func peakRSS() int64 {
	n, _ := procStatusBytes(os.Getpid(), "VmHWM:")
	return n
}

// procRSS is the resident set size of process pid (bytes; 0 when unknown).
func procRSS(pid int) int64 {
	n, _ := procStatusBytes(pid, "VmRSS:")
	return n
}
