package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ScaleOptions are the flags of `agentlog bench scale`.
type ScaleOptions struct {
	Sessions int
	Million  bool
	Events   int // events per session in the fill (one record)
	Sample   int // sessions the append phase writes to
	Records  int // records the append phase writes to each sampled session
	Workers  int
	JSON     bool
	DataDir  string
	// ServerCPUProfile: the large run's server writes a CPU profile of its whole life here.
	ServerCPUProfile string
}

// ScaleFigures are the figures of one run (at one session count). Rates are events/s (or
// sessions/s), durations ms, sizes bytes.
type ScaleFigures struct {
	Sessions            int     `json:"sessions"`
	FillSessionsPerSec  float64 `json:"fill_sessions_per_sec"`  // metadata + one record each
	AppendEventsPerSec  float64 `json:"append_events_per_sec"`  // guarded appends to a sample of the sessions, the stream holding all of them
	ServerRSSBytes      int64   `json:"server_rss_bytes"`       // the server process, after the fill and the append phase
	ServerRSSPerSession float64 `json:"server_rss_per_session"` // ... over the sessions
	DiskBytes           int64   `json:"disk_bytes"`             // the JetStream storage directory
	DiskPerSession      float64 `json:"disk_per_session"`       // ... over the sessions
	ProjectorStartMs    float64 `json:"projector_start_ms"`     // Projector.Start
	ProjectorCatchUpMs  float64 `json:"projector_catch_up_ms"`  // from Start to every event folded and checkpointed
	ProjectorRSSBytes   int64   `json:"projector_rss_bytes"`    // growth of this process's RSS once the projector caught up
	SessionsListMs      float64 `json:"sessions_list_ms"`       // client.Sessions, the first page of 100 (median of 3)
	SessionsListFullMs  float64 `json:"sessions_list_full_ms"`  // client.Sessions of every session, once
	MessagesMs          float64 `json:"messages_ms"`            // client.Messages of one session, first query (median of the sample)
	MessagesP99Ms       float64 `json:"messages_p99_ms"`
}

// ScaleResult is the JSON line of `agentlog bench scale --json`: the figures at 1,000 sessions
// and at N, from the same run, and their ratios (N / 1k). ratio is the append throughput's.
type ScaleResult struct {
	At1k       ScaleFigures       `json:"at_1k"`
	AtN        ScaleFigures       `json:"at_n"`
	Ratio      float64            `json:"ratio"` // append_events_per_sec at N / at 1k (target >= 0.8 at 100,000)
	Ratios     map[string]float64 `json:"ratios"`
	GOMAXPROCS int                `json:"gomaxprocs"`
}

// PrintScale writes res as one JSON line (asJSON) or as text.
func PrintScale(w io.Writer, asJSON bool, res ScaleResult) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if asJSON {
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	_, err = fmt.Fprintf(w, "agentlog bench scale: %d sessions against 1,000\n  append: %.0f events/s against %.0f (ratio %.2f)\n  %s\n",
		res.AtN.Sessions, res.AtN.AppendEventsPerSec, res.At1k.AppendEventsPerSec, res.Ratio, b)
	return err
}

// ScaleServer is the child process of RunScale (`agentlog bench scale-server`): an embedded
// nats-server on a random port storing in dir (and writing a CPU profile of its whole life to
// profile unless ""), which prints its client URL on stdout and runs until stdin closes or
// SIGINT/SIGTERM.
func ScaleServer(dir, profile string, stdout io.Writer) error {
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir, Port: -1, ServerName: "agentlog-bench-scale"})
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	fmt.Fprintln(stdout, srv.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-sig:
	case <-done:
	}
	return nil
}

// RunScale runs the scale bench twice, on a fresh server process (ScaleServer, started from this
// binary) each time: with 1,000 sessions, then with o.Sessions; progress goes to logw.
func RunScale(ctx context.Context, o ScaleOptions, logw io.Writer) (ScaleResult, error) {
	res := ScaleResult{GOMAXPROCS: runtime.GOMAXPROCS(0), Ratios: map[string]float64{}}
	parent, cleanup, err := benchDir(o.DataDir, "agentlog-bench-scale-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	if res.At1k, err = benchScaleRun(ctx, o, 1000, filepath.Join(parent, "1k"), "", logw); err != nil {
		return res, fmt.Errorf("1,000 sessions: %w", err)
	}
	if res.AtN, err = benchScaleRun(ctx, o, o.Sessions, filepath.Join(parent, strconv.Itoa(o.Sessions)), o.ServerCPUProfile, logw); err != nil {
		return res, fmt.Errorf("%d sessions: %w", o.Sessions, err)
	}
	res.Ratio = round2(res.AtN.AppendEventsPerSec / res.At1k.AppendEventsPerSec)
	a, _ := json.Marshal(res.At1k)
	n, _ := json.Marshal(res.AtN)
	var ma, mn map[string]float64
	_ = json.Unmarshal(a, &ma)
	_ = json.Unmarshal(n, &mn)
	for k, v := range ma {
		if v != 0 && k != "sessions" {
			res.Ratios[k] = round2(mn[k] / v)
		}
	}
	return res, nil
}

// benchScaleRun is one run of bench scale with n sessions, its server storing in dir (and
// profiling itself into profile unless "").
func benchScaleRun(ctx context.Context, o ScaleOptions, n int, dir, profile string, logw io.Writer) (ScaleFigures, error) {
	f := ScaleFigures{Sessions: n}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	url, pid, stopServer, err := startScaleServer(ctx, dir, profile)
	if err != nil {
		return f, err
	}
	defer stopServer()
	nc, _, err := natsdev.Connect(url, nats.Name("agentlog-bench-scale"))
	if err != nil {
		return f, err
	}
	defer nc.Close()
	// A guarded append to a session whose last record is in a cold block costs the server a
	// block load (it reads the subject's last message): at a million sessions such an answer
	// can take longer than the default 5 s.
	js, err := natsjs.New(nc, natsjs.WithDefaultTimeout(30*time.Second))
	if err != nil {
		return f, err
	}
	st, err := store.Provision(ctx, js, store.Config{})
	if err != nil {
		return f, fmt.Errorf("provision: %w", err)
	}
	id := func(i int) string { return fmt.Sprintf("scale-%07d", i) }
	t0 := time.Now().UnixMilli()
	evs, err := loggen.ChunkTurn(1, o.Events*(1+o.Records), 256, t0)
	if err != nil {
		return f, err
	}
	// 1. Fill.
	fmt.Fprintf(logw, "bench scale: %d sessions: fill...\n", n)
	tails := make([]uint64, n)
	start := time.Now()
	if err := forEach(ctx, n, o.Workers, func(i int) error {
		if err := st.CreateSession(ctx, session.Header{ID: id(i), CreatedAt: t0}); err != nil {
			return err
		}
		ss, err := st.Session(id(i))
		if err != nil {
			return err
		}
		r, err := ss.Append(ctx, 0, evs[:o.Events])
		tails[i] = r.StreamSeq
		return err
	}); err != nil {
		return f, fmt.Errorf("fill: %w", err)
	}
	f.FillSessionsPerSec = round1(float64(n) / time.Since(start).Seconds())
	fmt.Fprintf(logw, "bench scale: %d sessions: fill %.0f sessions/s\n", n, f.FillSessionsPerSec)

	// 2. Append throughput on a sample spread over the sessions.
	fmt.Fprintf(logw, "bench scale: %d sessions: append to %d of them...\n", n, o.Sample)
	sample := make([]int, min(o.Sample, n))
	for k := range sample {
		sample[k] = k * (n / len(sample))
	}
	start = time.Now()
	if err := forEach(ctx, len(sample), o.Workers, func(k int) error {
		i := sample[k]
		ss, err := st.Session(id(i))
		if err != nil {
			return err
		}
		for r := 1; r <= o.Records; r++ {
			res, err := ss.Append(ctx, tails[i], evs[r*o.Events:(r+1)*o.Events])
			if err != nil {
				return err
			}
			tails[i] = res.StreamSeq
		}
		return nil
	}); err != nil {
		return f, fmt.Errorf("append: %w", err)
	}
	f.AppendEventsPerSec = round1(float64(len(sample)*o.Records*o.Events) / time.Since(start).Seconds())

	// 3. Server RSS and disk.
	f.ServerRSSBytes = procRSS(pid)
	f.ServerRSSPerSession = round1(float64(f.ServerRSSBytes) / float64(n))
	f.DiskBytes = dirBytes(dir)
	f.DiskPerSession = round1(float64(f.DiskBytes) / float64(n))
	fmt.Fprintf(logw, "bench scale: %d sessions: append %.0f events/s; server RSS %d bytes, disk %d bytes\n", n, f.AppendEventsPerSec, f.ServerRSSBytes, f.DiskBytes)

	// 4. The projector: start and catch-up.
	fmt.Fprintf(logw, "bench scale: %d sessions: projector...\n", n)
	total := int64(n*o.Events + len(sample)*o.Records*o.Events)
	debug.FreeOSMemory()
	rss0 := procRSS(os.Getpid())
	p, err := projector.New(st, nc, projector.Options{Name: "bench-scale", Logger: benchLogger})
	if err != nil {
		return f, err
	}
	start = time.Now()
	if err := p.Start(ctx); err != nil {
		return f, err
	}
	defer p.Stop()
	f.ProjectorStartMs = ms(time.Since(start))
	if err := waitFolded(ctx, st, p, total); err != nil {
		return f, err
	}
	f.ProjectorCatchUpMs = ms(time.Since(start))
	f.ProjectorRSSBytes = procRSS(os.Getpid()) - rss0
	fmt.Fprintf(logw, "bench scale: %d sessions: projector start %.0f ms, caught up after %.0f ms, RSS +%d bytes\n", n, f.ProjectorStartMs, f.ProjectorCatchUpMs, f.ProjectorRSSBytes)

	// 5. Listing and messages latency.
	fmt.Fprintf(logw, "bench scale: %d sessions: listing and messages...\n", n)
	cl, err := client.New(nc)
	if err != nil {
		return f, err
	}
	var lists []time.Duration
	for range 3 {
		t := time.Now()
		rows := 0
		if _, err := cl.Sessions(ctx, client.SessionsQuery{Limit: 100}, func(client.SessionInfo) error { rows++; return nil }); err != nil {
			return f, fmt.Errorf("sessions: %w", err)
		}
		lists = append(lists, time.Since(t))
		if rows != 100 {
			return f, fmt.Errorf("sessions: the first page has %d rows, want 100", rows)
		}
	}
	slices.Sort(lists)
	f.SessionsListMs = ms(lists[1])
	t := time.Now()
	rows := 0
	if _, err := cl.Sessions(ctx, client.SessionsQuery{}, func(client.SessionInfo) error { rows++; return nil }); err != nil {
		return f, fmt.Errorf("sessions (all): %w", err)
	}
	f.SessionsListFullMs = ms(time.Since(t))
	if rows != n {
		return f, fmt.Errorf("sessions (all): %d rows, want %d", rows, n)
	}
	var msgs []time.Duration
	for k := 0; k < len(sample); k += max(len(sample)/50, 1) {
		t := time.Now()
		if _, err := cl.Messages(ctx, id(sample[k]+1)); err != nil { // a session of the fill only
			return f, fmt.Errorf("messages: %w", err)
		}
		msgs = append(msgs, time.Since(t))
	}
	slices.Sort(msgs)
	f.MessagesMs = ms(msgs[len(msgs)/2])
	f.MessagesP99Ms = ms(msgs[min(len(msgs)-1, len(msgs)*99/100)])
	return f, nil
}

// forEach runs fn(0..n-1) on workers goroutines; the first error stops it.
func forEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// waitFolded waits until p has folded total events and every partition consumer has nothing
// pending or unacknowledged.
func waitFolded(ctx context.Context, st *store.Store, p *projector.Projector, total int64) error {
	for {
		done := p.Applied() >= total
		for part := 0; part < st.Partitions() && done; part++ {
			c, err := st.JetStream().Consumer(ctx, wire.StreamName, projector.PartitionConsumer(part))
			if err != nil {
				return err
			}
			ci, err := c.Info(ctx)
			if err != nil {
				return err
			}
			done = ci.NumPending == 0 && ci.NumAckPending == 0
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// startScaleServer starts `agentlog bench scale-server --data dir` (this binary; with
// --cpuprofile profile unless "") and returns its
// client URL, its pid and a function that stops it (closing its stdin) and waits for it.
func startScaleServer(ctx context.Context, dir, profile string) (url string, pid int, stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	args := []string{"bench", "scale-server", "--data", dir}
	if profile != "" {
		args = append(args, "--cpuprofile", profile)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("the bench server did not start: %w", err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid, stop, nil
}

// dirBytes is the total size of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
