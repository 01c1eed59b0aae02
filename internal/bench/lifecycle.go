package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// LifecycleOptions are the flags of `agentlog bench lifecycle`.
type LifecycleOptions struct {
	Sessions        int // the large store (default 1,000,000)
	Active          int // of which active (default 10,000)
	ArchiveSessions int // sessions of the archive throughput phase
	ArchiveEvents   int // events per session there (100)
	RestoreEvents   int // events of the restore-vs-fork session (10,000)
	Rounds          int // rounds of the restore-vs-fork phase
	Workers         int
	Phases          []string // which phases run (default all): archive, restore, scale
	JSON            bool
	DataDir         string
}

// LifecycleResult is the JSON of `agentlog bench lifecycle --json`: every target's figure with its
// same-run baseline. Durations ms, sizes bytes, rates per second.
type LifecycleResult struct {
	GOMAXPROCS int `json:"gomaxprocs"`

	// Archive throughput: sessions of ArchiveEvents events archived by a lifecycle pass, against
	// the raw work (read each session's records, publish their bytes once, purge its subject).
	ArchiveSessions         int     `json:"archive_sessions,omitempty"`
	ArchiveEvents           int     `json:"archive_events,omitempty"`
	ArchivePerSec           float64 `json:"archive_sessions_per_sec,omitempty"` // target >= 2,000
	ArchiveBaselinePerSec   float64 `json:"archive_baseline_sessions_per_sec,omitempty"`
	ArchiveRatio            float64 `json:"archive_ratio,omitempty"`
	ArchiveCPUMsPerSession  float64 `json:"archive_cpu_ms_per_session,omitempty"`  // this process's CPU (server included)
	BaselineCPUMsPerSession float64 `json:"baseline_cpu_ms_per_session,omitempty"` // ... for the baseline
	// Archived bytes: the archives' payloads against gzip -6 of the same packed JSONL.
	ArchivedBytes      int64   `json:"archived_bytes,omitempty"`
	GzipBytes          int64   `json:"gzip6_bytes,omitempty"`
	JSONLBytes         int64   `json:"jsonl_bytes,omitempty"`
	ArchivedBytesRatio float64 `json:"archived_bytes_ratio,omitempty"` // target <= 1.2

	// Restore of a RestoreEvents-event session against a fork of it (medians of Rounds).
	RestoreEventsN  int             `json:"restore_events,omitempty"`
	RestoreMs       float64         `json:"restore_ms,omitempty"`
	ForkMs          float64         `json:"fork_ms,omitempty"`
	RestoreRatio    float64         `json:"restore_ratio,omitempty"` // target <= 2.0
	RoundsRestoreMs []float64       `json:"rounds_restore_ms,omitempty"`
	RoundsForkMs    []float64       `json:"rounds_fork_ms,omitempty"`
	RestoreCPURatio float64         `json:"restore_cpu_ratio,omitempty"`
	RestoreCPUMs    float64         `json:"restore_cpu_ms,omitempty"`
	ForkCPUMs       float64         `json:"fork_cpu_ms,omitempty"`
	Scale           *LifecycleScale `json:"scale,omitempty"`
}

// PrintLifecycle writes res as one JSON line (asJSON) or as indented JSON.
func PrintLifecycle(w io.Writer, asJSON bool, res LifecycleResult) error {
	var b []byte
	var err error
	if asJSON {
		b, err = json.Marshal(res)
	} else {
		b, err = json.MarshalIndent(res, "", "  ")
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func (o LifecycleOptions) phase(name string) bool {
	return len(o.Phases) == 0 || slices.Contains(o.Phases, name)
}

// RunLifecycle runs the phases of bench lifecycle; progress goes to logw.
func RunLifecycle(ctx context.Context, o LifecycleOptions, logw io.Writer) (LifecycleResult, error) {
	res := LifecycleResult{GOMAXPROCS: runtime.GOMAXPROCS(0)}
	parent, cleanup, err := benchDir(o.DataDir, "agentlog-bench-lifecycle-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	if o.phase("archive") {
		if err := benchArchive(ctx, o, filepath.Join(parent, "archive"), &res, logw); err != nil {
			return res, fmt.Errorf("archive phase: %w", err)
		}
	}
	if o.phase("restore") {
		if err := benchRestore(ctx, o, filepath.Join(parent, "restore"), &res, logw); err != nil {
			return res, fmt.Errorf("restore phase: %w", err)
		}
	}
	if o.phase("scale") {
		sc, err := benchLifecycleScale(ctx, o, filepath.Join(parent, "scale"), logw)
		if err != nil {
			return res, fmt.Errorf("scale phase: %w", err)
		}
		res.Scale = &sc
	}
	return res, nil
}

// generatedEvents is a realistic session of about n events (turns of messages, tool calls and
// streamed chunks), cut to n.
func generatedEvents(seed uint64, n int) ([]session.Event, error) {
	l := loggen.GenerateWith(seed, loggen.Options{MaxTurns: max(n/10, 2), MaxEvents: n + 40, Steady: true})
	_, evs, err := session.ReadJSONL(bytes.NewReader(l.JSONL()), "bench")
	if err != nil {
		return nil, err
	}
	if len(evs) > n {
		evs = evs[:n]
	}
	return evs, nil
}

// closedPrefix cuts evs after their last turn/end (a fork boundary).
func closedPrefix(evs []session.Event) []session.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == "turn/end" {
			return evs[:i+1]
		}
	}
	return evs
}

// writeSession creates session id and writes evs as records of per events.
func writeSession(ctx context.Context, st *store.Store, id string, evs []session.Event, per int) error {
	if err := st.CreateSession(ctx, session.Header{ID: id, CreatedAt: time.Now().UnixMilli()}); err != nil {
		return err
	}
	var last uint64
	for i := 0; i < len(evs); i += per {
		r, err := st.Append(ctx, id, last, evs[i:min(i+per, len(evs))])
		if err != nil {
			return err
		}
		last = r.StreamSeq
	}
	return nil
}

// benchArchive: ArchiveSessions sessions of ArchiveEvents events (written 25 events a record,
// folded by a projector) archived by one lifecycle pass, against the raw work on as many others.
func benchArchive(ctx context.Context, o LifecycleOptions, dir string, res *LifecycleResult, logw io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	nc, st, stop, err := benchServer(ctx, devstack.Options{DataDir: dir, Name: "agentlog-bench-lifecycle"})
	if err != nil {
		return err
	}
	defer stop()
	n := o.ArchiveSessions
	res.ArchiveSessions, res.ArchiveEvents = n, o.ArchiveEvents
	var tmpl [][]session.Event
	for k := range 16 {
		evs, err := generatedEvents(uint64(k+1), o.ArchiveEvents)
		if err != nil {
			return err
		}
		tmpl = append(tmpl, evs)
	}
	fmt.Fprintf(logw, "bench lifecycle: writing %d + %d sessions of %d events...\n", n, n, o.ArchiveEvents)
	if err := forEach(ctx, 2*n, o.Workers, func(i int) error {
		return writeSession(ctx, st, fmt.Sprintf("arch-%07d", i), tmpl[i%len(tmpl)], 25)
	}); err != nil {
		return err
	}
	p := projector.New(st, nc, projector.Options{Name: "bench-lifecycle", Logger: benchLogger})
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer p.Stop() // running, as in production: the pass runs in the projector that owns partition 0
	if err := waitFolded(ctx, st, p, int64(2*n*len(tmpl[0]))); err != nil {
		return err
	}

	// gzip -6 of each packed JSONL, the reference of the archived bytes.
	for i := range n {
		var buf bytes.Buffer
		h := session.Header{ID: fmt.Sprintf("arch-%07d", i), CreatedAt: 1}
		if err := session.WriteJSONL(&buf, &h, tmpl[i%len(tmpl)], session.WriteOptions{Pack: true}); err != nil {
			return err
		}
		res.JSONLBytes += int64(buf.Len())
		var gz bytes.Buffer
		w, _ := gzip.NewWriterLevel(&gz, 6)
		_, _ = w.Write(buf.Bytes())
		_ = w.Close()
		res.GzipBytes += int64(gz.Len())
	}

	// (b) the raw work on sessions n..2n-1: read the records, publish their bytes once, purge.
	fmt.Fprintf(logw, "bench lifecycle: (b) raw archive of %d sessions...\n", n)
	if _, err := st.JS.CreateStream(ctx, rawArchiveStream()); err != nil {
		return err
	}
	t, c := time.Now(), processCPU()
	if err := forEach(ctx, n, o.Workers, func(i int) error {
		return rawArchive(ctx, st, nc, fmt.Sprintf("arch-%07d", n+i))
	}); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	bel, bcpu := time.Since(t), processCPU()-c
	res.ArchiveBaselinePerSec = round1(float64(n) / bel.Seconds())
	res.BaselineCPUMsPerSession = round2(ms(bcpu) / float64(n))

	// (a) one lifecycle pass, its clock a day ahead, archiving sessions 0..n-1 (n..2n-1 are gone
	// from the hot stream already).
	fmt.Fprintf(logw, "bench lifecycle: (a) a lifecycle pass archiving %d sessions...\n", n)
	later := time.Now().Add(48 * time.Hour)
	stopProfile, err := startCPUProfile(os.Getenv("AGENTLOG_BENCH_ARCHIVE_PROFILE"))
	if err != nil {
		return err
	}
	t, c = time.Now(), processCPU()
	pr, err := st.LifecyclePass(ctx, store.Policy{ArchiveAfter: time.Hour}, store.PassOptions{Workers: o.Workers, Now: func() time.Time { return later }})
	el, cpu := time.Since(t), processCPU()-c
	stopProfile()
	if err != nil {
		return err
	}
	if pr.Archived != n || pr.Errors > 0 {
		for _, a := range pr.Actions {
			if a.Error != "" {
				return fmt.Errorf("the pass archived %d of %d sessions: %s: %s", pr.Archived, n, a.Session, a.Error)
			}
		}
		return fmt.Errorf("the pass archived %d of %d sessions", pr.Archived, n)
	}
	res.ArchivePerSec = round1(float64(n) / el.Seconds())
	res.ArchiveCPUMsPerSession = round2(ms(cpu) / float64(n))
	res.ArchiveRatio = round2(res.ArchivePerSec / res.ArchiveBaselinePerSec)
	res.ArchivedBytes = pr.ArchivedBytes
	res.ArchivedBytesRatio = round2(float64(res.ArchivedBytes) / float64(res.GzipBytes))
	fmt.Fprintf(logw, "bench lifecycle: archive %.0f sessions/s (raw %.0f), %d bytes against gzip -6 %d\n",
		res.ArchivePerSec, res.ArchiveBaselinePerSec, res.ArchivedBytes, res.GzipBytes)
	return nil
}

const rawArchiveName = "BENCH_RAW_ARCHIVE"

func rawArchiveStream() natsjs.StreamConfig {
	return natsjs.StreamConfig{Name: rawArchiveName, Subjects: []string{"bench.raw.>"}, MaxMsgsPerSubject: 1, AllowDirect: true}
}

// rawArchive is the baseline of one archive: the session's records read one by one from the
// stream leader, their bodies published once to another stream, the subject purged.
func rawArchive(ctx context.Context, st *store.Store, nc *nats.Conn, id string) error {
	subject, err := st.Subject(id)
	if err != nil {
		return err
	}
	var body []byte
	if _, err := st.ReadRecordBodies(ctx, id, func(_ uint64, _ []session.Event, b []byte) error {
		body = append(append(body, b...), '\n')
		return nil
	}); err != nil {
		return err
	}
	tok, _ := wire.Token(id)
	if _, err := st.JS.Publish(ctx, "bench.raw."+tok, body); err != nil {
		return err
	}
	return st.Stream.Purge(ctx, natsjs.WithPurgeSubject(subject))
}

// benchRestore: a RestoreEvents-event session, archived, restored, against a fork of it.
func benchRestore(ctx context.Context, o LifecycleOptions, dir string, res *LifecycleResult, logw io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	nc, st, stop, err := benchServer(ctx, devstack.Options{DataDir: dir, Name: "agentlog-bench-restore"})
	if err != nil {
		return err
	}
	defer stop()
	evs, err := generatedEvents(7, o.RestoreEvents+200)
	if err != nil {
		return err
	}
	evs = closedPrefix(evs)
	res.RestoreEventsN = len(evs)
	f := forker.New(st, nc, forker.Options{Logger: benchLogger})
	if err := f.Start(ctx); err != nil {
		return err
	}
	defer f.Stop()
	cl, err := client.New(nc)
	if err != nil {
		return err
	}
	var restores, forks, rcpu, fcpu []float64
	for r := range o.Rounds {
		src := "restore-src-" + strconv.Itoa(r)
		fmt.Fprintf(logw, "bench lifecycle: round %d/%d: a %d-event session...\n", r+1, o.Rounds, len(evs))
		if err := writeSession(ctx, st, src, evs, 50); err != nil {
			return err
		}
		t, c := time.Now(), processCPU()
		if _, err := cl.Fork(ctx, client.ForkRequest{Source: src, Child: src + "-child"}); err != nil {
			return fmt.Errorf("fork: %w", err)
		}
		forks, fcpu = append(forks, ms(time.Since(t))), append(fcpu, ms(processCPU()-c))
		if _, err := st.ArchiveSession(ctx, src); err != nil {
			return err
		}
		t, c = time.Now(), processCPU()
		rr, err := st.RestoreSession(ctx, src)
		if err != nil || !rr.Restored {
			return fmt.Errorf("restore: %+v, %v", rr, err)
		}
		restores, rcpu = append(restores, ms(time.Since(t))), append(rcpu, ms(processCPU()-c))
	}
	res.RoundsRestoreMs, res.RoundsForkMs = slices.Sorted(slices.Values(restores)), slices.Sorted(slices.Values(forks))
	res.RestoreMs, res.ForkMs = res.RoundsRestoreMs[len(restores)/2], res.RoundsForkMs[len(forks)/2]
	res.RestoreRatio = round2(res.RestoreMs / res.ForkMs)
	slices.Sort(rcpu)
	slices.Sort(fcpu)
	res.RestoreCPUMs, res.ForkCPUMs = rcpu[len(rcpu)/2], fcpu[len(fcpu)/2]
	res.RestoreCPURatio = round2(res.RestoreCPUMs / res.ForkCPUMs)
	return nil
}

// LifecycleScale is the large-store phase's figures.
type LifecycleScale struct{}

func benchLifecycleScale(ctx context.Context, o LifecycleOptions, dir string, logw io.Writer) (LifecycleScale, error) {
	return LifecycleScale{}, fmt.Errorf("not built yet")
}
