package multitenant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
)

// tenancyResult is one JSON line of TestTenancyCost. Sizes MiB, durations ms.
type tenancyResult struct {
	Mode           string  `json:"mode"` // accounts or namespaces
	Tenants        int     `json:"tenants"`
	Partitions     int     `json:"partitions"` // of each tenant's stream (0: 16)
	Streams        int     `json:"streams"`    // JetStream streams on the server (buckets included)
	Consumers      int     `json:"consumers"`  // durable consumers (the projectors')
	ServerRSSMiB   float64 `json:"server_rss_mib"`
	ServicesRSSMiB float64 `json:"services_rss_mib"` // growth of this process's RSS by the projectors and forkers, run in it
	RestartReadyMs float64 `json:"restart_ready_ms"` // SIGTERM, start, every tenant's stream answering
	AppendP50Ms    float64 `json:"append_p50_ms"`    // Append + Flush of one event, tenant 0
	AppendP99Ms    float64 `json:"append_p99_ms"`
	ReadP50Ms      float64 `json:"read_your_write_p50_ms"` // then Messages with MinSeq of that event
	ReadP99Ms      float64 `json:"read_your_write_p99_ms"`
}

// TestTenancyCost measures what isolating tenants costs, for the tenancy decision (deploy/SECURITY.md):
// N tenants as N NATS accounts (each with its own AGENTLOG stream, buckets, projector and forker)
// against N tenants as session-id namespaces in one account (one stream, one projector, one forker),
// on a real nats-server process: its RSS, its restart time, and an agent's append and
// read-your-write latency with the other tenants present. Off by default (a benchmark):
//
//	AGENTLOG_TENANCY_BENCH=1,10,50 go test -count=1 -run TestTenancyCost -v ./deploy/multi-tenant
func TestTenancyCost(t *testing.T) {
	spec := os.Getenv("AGENTLOG_TENANCY_BENCH")
	if spec == "" {
		t.Skip("a benchmark: set AGENTLOG_TENANCY_BENCH=1,10,50 (tenant counts) to run it")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	// AGENTLOG_TENANCY_PARTITIONS: the partitions of every tenant's stream (default 16).
	if p := os.Getenv("AGENTLOG_TENANCY_PARTITIONS"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			t.Fatalf("AGENTLOG_TENANCY_PARTITIONS=%q", p)
		}
		partitions = n
	}
	var results []tenancyResult
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("AGENTLOG_TENANCY_BENCH: %q is not a tenant count", f)
		}
		for _, mode := range []string{"namespaces", "accounts"} {
			r := measureTenancy(t, bin, mode, n)
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
			results = append(results, r)
		}
		ns, acc := results[len(results)-2], results[len(results)-1]
		fmt.Printf(`{"tenants":%d,"rss_ratio":%.2f,"restart_ratio":%.2f,"append_p50_ratio":%.2f,"read_your_write_p50_ratio":%.2f}`+"\n",
			n, acc.ServerRSSMiB/ns.ServerRSSMiB, acc.RestartReadyMs/ns.RestartReadyMs, acc.AppendP50Ms/ns.AppendP50Ms, acc.ReadP50Ms/ns.ReadP50Ms)
	}
}

// partitions of each tenant's AGENTLOG stream (0: the default, 16).
var partitions int

func measureTenancy(t *testing.T, bin, mode string, n int) tenancyResult {
	dir := t.TempDir()
	port, _ := multitenant.FreePort("127.0.0.1")
	httpPort, _ := multitenant.FreePort("127.0.0.1")
	accounts := 1
	if mode == "accounts" {
		accounts = n
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "listen: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\naccounts {\n", port, httpPort, filepath.Join(dir, "data"))
	for i := 0; i < accounts; i++ {
		fmt.Fprintf(&conf, "  T%d { jetstream: enabled, users: [ { user: t%d, password: pw } ] }\n", i, i)
	}
	conf.WriteString("}\n")
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-c", cf)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	srv := start()
	defer func() { srv.Process.Kill(); srv.Wait() }()
	healthy := func() {
		checkfor.Check(t, 2*time.Minute, 5*time.Millisecond, func() error {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", httpPort))
			if err != nil {
				return fmt.Errorf("nats-server not healthy: %w", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("nats-server not healthy: /healthz %d", resp.StatusCode)
			}
			return nil
		})
	}
	healthy()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type tenant struct {
		nc    *nats.Conn
		store *store.Store
		proj  *projector.Projector
		fork  *forker.Forker
	}
	tenants := make([]tenant, accounts)
	runtime.GC()
	rssBefore := rssMiB(t, os.Getpid())
	for i := range tenants {
		nc, js, err := natsdev.Connect(url, nats.UserInfo(fmt.Sprintf("t%d", i), "pw"))
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Provision(ctx, js, store.Config{Partitions: partitions})
		if err != nil {
			t.Fatal(err)
		}
		p, err := projector.New(st, nc, projector.Options{Name: fmt.Sprintf("p%d", i), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		f, err := forker.New(st, nc, forker.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Start(ctx); err != nil {
			t.Fatal(err)
		}
		tenants[i] = tenant{nc, st, p, f}
	}
	time.Sleep(time.Second) // a sleep, not a condition: the services settle before their RSS is measured
	servicesMiB := rssMiB(t, os.Getpid()) - rssBefore
	// Every tenant gets 5 sessions of 20 events: in its account, or under its id prefix.
	for ti := 0; ti < n; ti++ {
		tn := tenants[ti%accounts]
		pub, err := publisher.New(tn.store, tn.nc, publisher.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for s := 0; s < 5; s++ {
			evs, _ := loggen.ChunkTurn(uint64(ti*10+s), 20, 200, 1_700_000_000_000)
			w, err := pub.Create(ctx, session.Header{ID: fmt.Sprintf("t%d-s%d", ti, s), CreatedAt: 1_700_000_000_000})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if err := w.Append(ev); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		pub.Close(ctx)
	}

	// Tenant 0's agent: 100 rounds of one event appended, flushed, then read back through the
	// query service (MinSeq: read-your-writes).
	t0 := tenants[0]
	pub, _ := publisher.New(t0.store, t0.nc, publisher.Options{})
	c, _ := client.New(t0.nc)
	evs, _ := loggen.ChunkTurn(99, 100, 200, 1_700_000_000_000)
	w, err := pub.Create(ctx, session.Header{ID: "t0-latency", CreatedAt: 1_700_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	var appendMs, readMs []float64
	for _, ev := range evs {
		t1 := time.Now()
		if err := w.Append(ev); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		if _, err := c.Messages(ctx, "t0-latency", client.MinSeq(ev.Seq)); err != nil {
			t.Fatal(err)
		}
		appendMs = append(appendMs, ms(t2.Sub(t1)))
		readMs = append(readMs, ms(time.Since(t2)))
	}
	w.Close(ctx)
	pub.Close(ctx)

	time.Sleep(time.Second) // a sleep, not a condition: the server settles before its RSS is measured
	r := tenancyResult{Mode: mode, Tenants: n, Partitions: partitions, ServerRSSMiB: rssMiB(t, srv.Process.Pid), ServicesRSSMiB: servicesMiB}
	r.AppendP50Ms, r.AppendP99Ms = pct(appendMs, 50), pct(appendMs, 99)
	r.ReadP50Ms, r.ReadP99Ms = pct(readMs, 50), pct(readMs, 99)
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", httpPort)); err == nil {
		var jsz struct {
			Streams   int `json:"streams"`
			Consumers int `json:"consumers"`
		}
		json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		r.Streams, r.Consumers = jsz.Streams, jsz.Consumers
	}
	for _, tn := range tenants {
		tn.proj.Stop()
		tn.fork.Stop()
		tn.nc.Close()
	}

	// Restart: SIGTERM, start again, until every tenant's stream answers.
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	t1 := time.Now()
	srv = start()
	healthy()
	for i := 0; i < accounts; i++ {
		checkfor.Check(t, 2*time.Minute, 5*time.Millisecond, func() error {
			nc, js, err := natsdev.Connect(url, nats.UserInfo(fmt.Sprintf("t%d", i), "pw"))
			if err != nil {
				return err
			}
			defer nc.Close()
			_, err = js.Stream(ctx, wire.StreamName)
			return err
		})
	}
	r.RestartReadyMs = ms(time.Since(t1))
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(xs []float64, p int) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func rssMiB(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("RSS needs /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
