package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/natsdev"
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
	HotCompression  string   // the hot stream's compression in the scale phase: s2 (default) or none
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
	ss, err := st.Session(id)
	if err != nil {
		return err
	}
	var last uint64
	for i := 0; i < len(evs); i += per {
		r, err := ss.Append(ctx, last, evs[i:min(i+per, len(evs))])
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
	p, err := projector.New(st, nc, projector.Options{Name: "bench-lifecycle", Logger: benchLogger})
	if err != nil {
		return err
	}
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
	if _, err := st.JetStream().CreateStream(ctx, rawArchiveStream()); err != nil {
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
	ss, err := st.Session(id)
	if err != nil {
		return err
	}
	var body []byte
	if _, err := ss.Records(ctx, func(r store.Record) error {
		body = append(append(body, r.Body...), '\n')
		return nil
	}); err != nil {
		return err
	}
	if _, err := st.JetStream().Publish(ctx, "bench.raw."+ss.Token(), body); err != nil {
		return err
	}
	return st.Stream().Purge(ctx, natsjs.WithPurgeSubject(ss.Subject()))
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
	f, err := forker.New(st, nc, forker.Options{Logger: benchLogger})
	if err != nil {
		return err
	}
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
		sh, err := st.Session(src)
		if err != nil {
			return err
		}
		if _, err := sh.Archive(ctx); err != nil {
			return err
		}
		t, c = time.Now(), processCPU()
		rr, err := sh.Restore(ctx)
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

// LifecycleScale is the large-store phase's figures, each with its baseline of the same run.
type LifecycleScale struct {
	Sessions       int     `json:"sessions"`
	Active         int     `json:"active"`
	HotCompression string  `json:"hot_compression"`
	FillMs         float64 `json:"fill_ms"`
	ArchiveMs      float64 `json:"archive_ms"` // archiving sessions - active of them, one by one (64 at a time)
	ArchivePerSec  float64 `json:"archive_sessions_per_sec"`

	// Append: the sample of active sessions, guarded records, against a fresh store of active
	// sessions (the same work): append_ratio (target >= 0.9).
	AppendEventsPerSec         float64 `json:"append_events_per_sec"`
	BaselineAppendEventsPerSec float64 `json:"baseline_append_events_per_sec"`
	AppendRatio                float64 `json:"append_ratio"`
	// The server's CPU per appended record in both (less noisy than the rates on a shared machine).
	AppendServerCPUUsPerRecord         float64 `json:"append_server_cpu_us_per_record"`
	BaselineAppendServerCPUUsPerRecord float64 `json:"baseline_append_server_cpu_us_per_record"`

	// The hot stream's bytes (its state's) with all but active archived, against the same store
	// before archiving: hot_bytes_ratio (target <= 0.05); and its files on disk.
	HotBytesBefore     uint64  `json:"hot_bytes_before"`
	HotBytesAfter      uint64  `json:"hot_bytes_after"`
	HotBytesRatio      float64 `json:"hot_bytes_ratio"`
	HotDiskBytesBefore int64   `json:"hot_disk_bytes_before"`
	HotDiskBytesAfter  int64   `json:"hot_disk_bytes_after"`
	ArchiveStreamBytes uint64  `json:"archive_stream_bytes"`

	// A projector restarted with its checkpoints, from Start to serving a fresh messages query
	// (target <= 2,000 ms), and the same on the fresh store.
	RestartReadyMs         float64 `json:"restart_ready_ms"`
	BaselineRestartReadyMs float64 `json:"baseline_restart_ready_ms"`

	// sessions --limit 50 (the default order), median of 5, and the same on the fresh store.
	ListFirstPageMs         float64 `json:"list_first_page_ms"`
	BaselineListFirstPageMs float64 `json:"baseline_list_first_page_ms"`
	// The other orders' first page at the large store, once each (what they cost).
	ListActivityMs float64 `json:"list_activity_ms"`
	ListIDMs       float64 `json:"list_id_ms"`
	ListArchivedMs float64 `json:"list_state_archived_ms"`
	ElapsedS       float64 `json:"elapsed_s"`
}

// benchLifecycleScale runs a fresh store of Active sessions (the baselines), then a store of
// Sessions sessions of which all but Active are archived; each on a server of its own (a child
// process).
func benchLifecycleScale(ctx context.Context, o LifecycleOptions, dir string, logw io.Writer) (LifecycleScale, error) {
	start := time.Now()
	sc := LifecycleScale{Sessions: o.Sessions, Active: o.Active, HotCompression: cmpOr(o.HotCompression, "s2")}
	base, err := lifecycleScaleRun(ctx, o, o.Active, o.Active, filepath.Join(dir, "fresh"), logw)
	if err != nil {
		return sc, fmt.Errorf("the fresh store of %d sessions: %w", o.Active, err)
	}
	big, err := lifecycleScaleRun(ctx, o, o.Sessions, o.Active, filepath.Join(dir, "large"), logw)
	if err != nil {
		return sc, fmt.Errorf("the store of %d sessions: %w", o.Sessions, err)
	}
	sc.FillMs, sc.ArchiveMs, sc.ArchivePerSec = big.fillMs, big.archiveMs, big.archivePerSec
	sc.AppendEventsPerSec, sc.BaselineAppendEventsPerSec = big.appendRate, base.appendRate
	sc.AppendRatio = round2(big.appendRate / base.appendRate)
	sc.AppendServerCPUUsPerRecord, sc.BaselineAppendServerCPUUsPerRecord = big.appendCPUUs, base.appendCPUUs
	sc.HotBytesBefore, sc.HotBytesAfter = big.hotBefore, big.hotAfter
	sc.HotBytesRatio = round2(float64(big.hotAfter) / float64(big.hotBefore))
	sc.HotDiskBytesBefore, sc.HotDiskBytesAfter, sc.ArchiveStreamBytes = big.diskBefore, big.diskAfter, big.archiveBytes
	sc.RestartReadyMs, sc.BaselineRestartReadyMs = big.restartMs, base.restartMs
	sc.ListFirstPageMs, sc.BaselineListFirstPageMs = big.listMs, base.listMs
	sc.ListActivityMs, sc.ListIDMs, sc.ListArchivedMs = big.listActivityMs, big.listIDMs, big.listArchivedMs
	sc.ElapsedS = round1(time.Since(start).Seconds())
	return sc, nil
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

type scaleRunFigures struct {
	fillMs, archiveMs, archivePerSec         float64
	appendRate, appendCPUUs                  float64
	hotBefore, hotAfter, archiveBytes        uint64
	diskBefore, diskAfter                    int64
	restartMs, listMs                        float64
	listActivityMs, listIDMs, listArchivedMs float64
}

// lifecycleScaleRun fills n sessions (metadata and one record of 4 events each), archives all but
// the first active, then measures appends to a sample of the active ones, the hot stream's bytes,
// a projector's restart and the first page of a listing.
func lifecycleScaleRun(ctx context.Context, o LifecycleOptions, n, active int, dir string, logw io.Writer) (scaleRunFigures, error) {
	var f scaleRunFigures
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	url, pid, stopServer, err := startScaleServer(ctx, dir, "")
	if err != nil {
		return f, err
	}
	defer stopServer()
	nc, _, err := natsdev.Connect(url, nats.Name("agentlog-bench-lifecycle"))
	if err != nil {
		return f, err
	}
	defer nc.Close()
	js, err := natsjs.New(nc, natsjs.WithDefaultTimeout(30*time.Second))
	if err != nil {
		return f, err
	}
	st, err := store.Provision(ctx, js, store.Config{Compression: o.HotCompression})
	if err != nil {
		return f, fmt.Errorf("provision: %w", err)
	}
	id := func(i int) string { return fmt.Sprintf("life-%07d", i) }
	t0 := time.Now().UnixMilli()
	const per, records = 4, 20
	evs, err := loggen.ChunkTurn(1, per*(1+records)+1, 256, t0) // and one more: the fresh query's record
	if err != nil {
		return f, err
	}
	fmt.Fprintf(logw, "bench lifecycle scale: %d sessions: fill...\n", n)
	tails := make([]uint64, n)
	sess := func(i int) *store.Session {
		ss, _ := st.Session(id(i)) // the bench's ids are valid
		return ss
	}
	start := time.Now()
	if err := forEach(ctx, n, o.Workers, func(i int) error {
		if err := st.CreateSession(ctx, session.Header{ID: id(i), CreatedAt: t0}); err != nil {
			return err
		}
		r, err := sess(i).Append(ctx, 0, evs[:per])
		tails[i] = r.StreamSeq
		return err
	}); err != nil {
		return f, fmt.Errorf("fill: %w", err)
	}
	f.fillMs = ms(time.Since(start))
	info, err := st.Stream().Info(ctx)
	if err != nil {
		return f, err
	}
	f.hotBefore, f.diskBefore = info.State.Bytes, streamDirBytes(dir, wire.StreamName)
	if n > active {
		fmt.Fprintf(logw, "bench lifecycle scale: %d sessions: archive %d of them...\n", n, n-active)
		start = time.Now()
		var done atomic.Int64
		if err := forEach(ctx, n-active, o.Workers, func(k int) error {
			r, err := sess(active+k).Archive(ctx, store.ArchiveChecked())
			if err == nil && !r.Archived {
				err = fmt.Errorf("session %q not archived: %+v", id(active+k), r)
			}
			if d := done.Add(1); d%100_000 == 0 {
				fmt.Fprintf(logw, "bench lifecycle scale: %d archived (%.0f/s)\n", d, float64(d)/time.Since(start).Seconds())
			}
			return err
		}); err != nil {
			return f, fmt.Errorf("archive: %w", err)
		}
		f.archiveMs = ms(time.Since(start))
		f.archivePerSec = round1(float64(n-active) / time.Since(start).Seconds())
		// Let the file store settle (compaction of emptied blocks) before its bytes are read.
		time.Sleep(2 * time.Second)
		if info, err = st.Stream().Info(ctx); err != nil {
			return f, err
		}
		f.hotAfter = info.State.Bytes
		f.diskAfter = streamDirBytes(dir, wire.StreamName)
		if ai, err := st.Archive().Info(ctx); err == nil {
			f.archiveBytes = ai.State.Bytes
		}
		fmt.Fprintf(logw, "bench lifecycle scale: %d sessions: archived in %.0f ms (%.0f/s); hot bytes %d -> %d\n", n, f.archiveMs, f.archivePerSec, f.hotBefore, f.hotAfter)
	}

	// Appends to a sample of the active sessions.
	sample := min(active, 1000)
	cpu0 := procCPU(pid)
	start = time.Now()
	if err := forEach(ctx, sample, o.Workers, func(k int) error {
		i := k * (active / sample)
		for r := 1; r <= records; r++ {
			res, err := sess(i).Append(ctx, tails[i], evs[r*per:(r+1)*per])
			if err != nil {
				return err
			}
			tails[i] = res.StreamSeq
		}
		return nil
	}); err != nil {
		return f, fmt.Errorf("append: %w", err)
	}
	f.appendRate = round1(float64(sample*records*per) / time.Since(start).Seconds())
	f.appendCPUUs = round1(float64((procCPU(pid) - cpu0).Microseconds()) / float64(sample*records))
	fmt.Fprintf(logw, "bench lifecycle scale: %d sessions: append %.0f events/s (server %.1f µs CPU a record)\n", n, f.appendRate, f.appendCPUUs)

	// A projector folds the hot stream, stops, and starts again with its checkpoints.
	p, err := projector.New(st, nc, projector.Options{Name: "bench-lifecycle", Logger: benchLogger, LifecycleInterval: -1})
	if err != nil {
		return f, err
	}
	if err := p.Start(ctx); err != nil {
		return f, err
	}
	total := int64(active*per + sample*records*per)
	if err := waitFolded(ctx, st, p, total); err != nil {
		p.Stop()
		return f, err
	}
	if err := p.Stop(); err != nil {
		return f, err
	}
	cl, err := client.New(nc)
	if err != nil {
		return f, err
	}
	p2, err := projector.New(st, nc, projector.Options{Name: "bench-lifecycle", Logger: benchLogger, LifecycleInterval: -1})
	if err != nil {
		return f, err
	}
	start = time.Now()
	if err := p2.Start(ctx); err != nil {
		return f, err
	}
	defer p2.Stop()
	target := id(0)
	last := int64(per * (1 + records))
	if _, err := sess(0).Append(ctx, tails[0], evs[last:last+1]); err != nil {
		return f, err
	}
	if _, err := cl.Messages(ctx, target, client.MinSeq(last)); err != nil {
		return f, fmt.Errorf("messages after the restart: %w", err)
	}
	f.restartMs = ms(time.Since(start))
	fmt.Fprintf(logw, "bench lifecycle scale: %d sessions: projector restarted and served a fresh query in %.0f ms\n", n, f.restartMs)

	// Listing.
	page := func(q client.SessionsQuery) (time.Duration, error) {
		t := time.Now()
		rows := 0
		_, err := cl.Sessions(ctx, q, func(client.SessionInfo) error { rows++; return nil })
		if err == nil && rows != q.Limit && q.Limit <= n {
			err = fmt.Errorf("the first page has %d rows, want %d", rows, q.Limit)
		}
		return time.Since(t), err
	}
	var lists []time.Duration
	for range 5 {
		d, err := page(client.SessionsQuery{Sort: client.SortCreated, Limit: 50})
		if err != nil {
			return f, fmt.Errorf("sessions: %w", err)
		}
		lists = append(lists, d)
	}
	slices.Sort(lists)
	f.listMs = ms(lists[2])
	if d, err := page(client.SessionsQuery{Sort: client.SortActivity, Limit: 50}); err == nil {
		f.listActivityMs = ms(d)
	}
	if d, err := page(client.SessionsQuery{Sort: client.SortID, Limit: 50}); err == nil {
		f.listIDMs = ms(d)
	}
	if n > active {
		if d, err := page(client.SessionsQuery{Sort: client.SortCreated, State: client.StateArchived, Limit: 50}); err == nil {
			f.listArchivedMs = ms(d)
		}
	}
	fmt.Fprintf(logw, "bench lifecycle scale: %d sessions: sessions --limit 50 %.1f ms (activity %.0f, id %.0f)\n", n, f.listMs, f.listActivityMs, f.listIDMs)
	return f, nil
}

// procCPU is the user and system CPU time process pid has used (from /proc; 0 elsewhere).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond // clock ticks of 10 ms (USER_HZ 100)
}

// streamDirBytes is the size of stream name's directory under the server's storage dir.
func streamDirBytes(dir, name string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == name && filepath.Base(filepath.Dir(path)) == "streams" {
			n += dirBytes(path)
			return filepath.SkipDir
		}
		return nil
	})
	return n
}
