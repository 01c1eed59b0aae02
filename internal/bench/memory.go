package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentlog/agentlog/session"
)

// MemoryOptions are the flags of `agentlog bench memory`.
type MemoryOptions struct {
	Events  int
	Size    int
	Binary  string // the agentlog binary measured (default: this one)
	DataDir string
	Timeout time.Duration
}

// MemoryResult is the JSON object `agentlog bench memory` prints. Sizes are bytes, times ms.
type MemoryResult struct {
	Binary    string `json:"binary"`
	Events    int    `json:"events"`
	FileBytes int64  `json:"file_bytes"`

	ImportPeakRSSBytes   int64   `json:"import_peak_rss_bytes"`
	ImportMs             float64 `json:"import_ms"`
	FirstMessagesMs      float64 `json:"first_messages_ms"`
	FirstMessagesBytes   int64   `json:"first_messages_bytes"`
	EventsPeakRSSBytes   int64   `json:"events_peak_rss_bytes"`
	EventsMs             float64 `json:"events_ms"`
	EventsOutputBytes    int64   `json:"events_output_bytes"`
	ServerRSSBeforeFork  int64   `json:"server_rss_before_fork_bytes"`
	ServerPeakDuringFork int64   `json:"server_peak_rss_during_fork_bytes"`
	ForkServerGrowth     int64   `json:"fork_server_rss_growth_bytes"`
	ForkMs               float64 `json:"fork_ms"`
	ProjectorPeakRSS     int64   `json:"projector_peak_rss_bytes"`
	// The harness's own peak RSS: a child's ru_maxrss is never below the RSS of the process that
	// started it, so this is the floor of the figures above.
	HarnessPeakRSS int64 `json:"harness_peak_rss_bytes"`

	Targets MemoryTargets   `json:"targets"`
	Pass    map[string]bool `json:"pass"`
}

// MemoryTargets are the targets of RunMemory's figures (bytes, ms).
type MemoryTargets struct {
	ImportPeakRSSBytes int64   `json:"import_peak_rss_bytes"`
	EventsPeakRSSBytes int64   `json:"events_peak_rss_bytes"`
	ForkServerGrowth   int64   `json:"fork_server_rss_growth_bytes"`
	FirstMessagesMs    float64 `json:"first_messages_ms"`
}

var memoryTargets = MemoryTargets{
	ImportPeakRSSBytes: 256 << 20, EventsPeakRSSBytes: 256 << 20, ForkServerGrowth: 256 << 20, FirstMessagesMs: 1000,
}

// PrintMemory writes res as one indented JSON object (not HTML-escaped).
func PrintMemory(w io.Writer, res MemoryResult) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// RunMemory measures the peak memory of one big session's import, events and fork, and the first
// messages' latency, each a child process of o.Binary (default: this binary) against `agentlog
// dev` and `agentlog projector` children; progress goes to logw. Linux only (it reads /proc).
func RunMemory(ctx context.Context, o MemoryOptions, logw io.Writer) (MemoryResult, error) {
	res := MemoryResult{Events: o.Events, Targets: memoryTargets}
	bin := o.Binary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return res, err
		}
		bin = self
	}
	res.Binary = bin
	dir, cleanup, err := benchDir(o.DataDir, "agentlog-bench-memory-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	const id = "bench-memory"
	file := filepath.Join(dir, "big.jsonl")
	fmt.Fprintf(logw, "bench memory: writing %d events to %s...\n", o.Events, file)
	size, err := writeBigSession(file, id, o.Events, o.Size)
	if err != nil {
		return res, err
	}
	res.FileBytes = size

	dev := exec.CommandContext(ctx, bin, "dev", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0",
		"--projectors", "0", "--forkers", "1", "--system-user", "")
	devLog, err := os.Create(filepath.Join(dir, "dev.log"))
	if err != nil {
		return res, err
	}
	defer devLog.Close()
	dev.Stdout, dev.Stderr = devLog, devLog
	if err := dev.Start(); err != nil {
		return res, fmt.Errorf("start agentlog dev: %w", err)
	}
	defer stopChild(dev)
	url, err := waitDevURL(ctx, devLog.Name(), 60*time.Second)
	if err != nil {
		return res, fmt.Errorf("agentlog dev (log in %s): %w", devLog.Name(), err)
	}
	proj := exec.CommandContext(ctx, bin, "--nats", url, "projector", "--name", "bench-memory")
	proj.Stdout, proj.Stderr = devLog, devLog
	if err := proj.Start(); err != nil {
		return res, fmt.Errorf("start agentlog projector: %w", err)
	}
	projStopped := false
	defer func() {
		if !projStopped {
			stopChild(proj)
		}
	}()

	step := func(name string, stdout io.Writer, args ...string) (time.Duration, *os.ProcessState, error) {
		fmt.Fprintf(logw, "bench memory: %s...\n", name)
		sctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		c := exec.CommandContext(sctx, bin, append([]string{"--nats", url, "--timeout", o.Timeout.String()}, args...)...)
		var stderr strings.Builder
		c.Stdout, c.Stderr = stdout, &stderr
		t0 := time.Now()
		err := c.Run()
		el := time.Since(t0)
		if err != nil {
			return el, c.ProcessState, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
		}
		return el, c.ProcessState, nil
	}

	el, st, err := step("import", io.Discard, "import", file, "--session", id)
	if err != nil {
		return res, err
	}
	res.ImportMs, res.ImportPeakRSSBytes = ms(el), maxRSS(st)

	var msgs countingWriter
	if el, _, err = step("first messages", &msgs, "messages", id); err != nil {
		return res, err
	}
	res.FirstMessagesMs, res.FirstMessagesBytes = ms(el), msgs.n

	var evs countingWriter
	if el, st, err = step("events", &evs, "events", id); err != nil {
		return res, err
	}
	res.EventsMs, res.EventsPeakRSSBytes, res.EventsOutputBytes = ms(el), maxRSS(st), evs.n

	pid := dev.Process.Pid
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return res, fmt.Errorf("reset the dev process's peak RSS: %w", err)
	}
	if res.ServerRSSBeforeFork, err = procStatusBytes(pid, "VmRSS:"); err != nil {
		return res, err
	}
	if el, _, err = step("fork", io.Discard, "fork", id, "--child", id+"-fork"); err != nil {
		return res, err
	}
	res.ForkMs = ms(el)
	if res.ServerPeakDuringFork, err = procStatusBytes(pid, "VmHWM:"); err != nil {
		return res, err
	}
	res.ForkServerGrowth = res.ServerPeakDuringFork - res.ServerRSSBeforeFork
	stopChild(proj)
	projStopped = true
	if proj.ProcessState != nil {
		res.ProjectorPeakRSS = maxRSS(proj.ProcessState)
	}
	res.HarnessPeakRSS, _ = procStatusBytes(os.Getpid(), "VmHWM:")
	res.Pass = map[string]bool{
		"import":         res.ImportPeakRSSBytes <= memoryTargets.ImportPeakRSSBytes,
		"events":         res.EventsPeakRSSBytes <= memoryTargets.EventsPeakRSSBytes,
		"fork":           res.ForkServerGrowth <= memoryTargets.ForkServerGrowth,
		"first_messages": res.FirstMessagesMs <= memoryTargets.FirstMessagesMs,
	}
	return res, nil
}

// writeBigSession writes a header and one turn of n events (turn/start, step/start, n-4
// assistant/chunk text deltas whose data is about size bytes of JSON, step/end, turn/end) to path, an
// event at a time (the harness stays small: a child's ru_maxrss counts the memory of the process
// it was started from), and returns the file's size.
func writeBigSession(path, id string, n, size int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	t0 := time.Now().UnixMilli()
	jw := session.NewJSONLWriter(f, session.WriteOptions{})
	if err := jw.WriteHeader(&session.Header{ID: id, CreatedAt: t0}); err != nil {
		return 0, err
	}
	const prefix, suffix = `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"`, `"}}`
	text := make([]byte, 0, len(prefix)+size+len(suffix))
	for seq := range n {
		ev := session.Event{Seq: int64(seq), Time: json.Number(strconv.FormatInt(t0+int64(seq), 10))}
		switch seq {
		case 0:
			ev.Type, ev.Data = "turn/start", json.RawMessage(`{"turn":1}`)
		case 1:
			ev.Type, ev.Data = "step/start", json.RawMessage(`{"turn":1,"step":1}`)
		case n - 2:
			ev.Type, ev.Data = "step/end", json.RawMessage(`{"turn":1,"step":1}`)
		case n - 1:
			ev.Type, ev.Data = "turn/end", json.RawMessage(`{"turn":1,"reason":{"kind":"completed"}}`)
		default:
			ev.Type = "assistant/chunk"
			text = append(text[:0], prefix...)
			for i := range max(size-len(prefix)-len(suffix), 1) {
				text = append(text, "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(seq*7+i)%63])
			}
			ev.Data = append(text, suffix...)
		}
		if err := jw.Write(ev); err != nil {
			return 0, err
		}
	}
	if err := jw.Flush(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// maxRSS is a finished child's peak resident set in bytes (Linux reports ru_maxrss in KiB).
func maxRSS(st *os.ProcessState) int64 {
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) * 1024
	}
	return 0
}

// procStatusBytes reads one "kB" field (VmRSS:, VmHWM:) of /proc/PID/status, in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// waitDevURL waits for the line in which `agentlog dev` names its URL in the log file at path,
// and returns the URL.
func waitDevURL(ctx context.Context, path string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		b, _ := os.ReadFile(path)
		if m := devURLLine.FindSubmatch(b); m != nil {
			return string(m[1]), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("no URL in its output after %s: %w", limit, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// devURLLine matches the line `agentlog dev` prints once it serves.
var devURLLine = regexp.MustCompile(`nats-server listening on (nats://\S+)`)

// stopChild ends a child process with SIGTERM (SIGKILL after 10 s) and waits for it.
func stopChild(c *exec.Cmd) {
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// countingWriter counts the bytes written to it and drops them.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
