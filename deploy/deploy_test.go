package deploy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

var clusterFiles = []string{"cluster-3-node/n1.conf", "cluster-3-node/n2.conf", "cluster-3-node/n3.conf"}

func load(t *testing.T, path string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return opts
}

func TestSingleNodeConfigParses(t *testing.T) {
	o := load(t, "single-node.conf")
	if !o.JetStream || o.StoreDir == "" || o.ServerName == "" || o.MaxPayload != 1<<20 || o.SyncAlways || o.SyncInterval != 2*time.Minute {
		t.Fatalf("single-node.conf: jetstream %v store %q name %q max_payload %d sync always %v interval %s",
			o.JetStream, o.StoreDir, o.ServerName, o.MaxPayload, o.SyncAlways, o.SyncInterval)
	}
	if o.Cluster.Port != 0 || len(o.Routes) != 0 {
		t.Errorf("single-node.conf has a cluster: %+v", o.Cluster)
	}
}

func TestClusterConfigsParse(t *testing.T) {
	names, dirs, ports := map[string]bool{}, map[string]bool{}, map[int]string{}
	for _, f := range clusterFiles {
		o := load(t, f)
		if !o.JetStream || o.StoreDir == "" || o.MaxPayload != 1<<20 {
			t.Errorf("%s: jetstream %v store %q max_payload %d", f, o.JetStream, o.StoreDir, o.MaxPayload)
		}
		if o.Cluster.Name != "agentlog" || len(o.Routes) != 3 {
			t.Errorf("%s: cluster %q with %d routes, want agentlog with 3", f, o.Cluster.Name, len(o.Routes))
		}
		if names[o.ServerName] || dirs[o.StoreDir] {
			t.Errorf("%s: server name %q or store dir %q shared with another node", f, o.ServerName, o.StoreDir)
		}
		names[o.ServerName], dirs[o.StoreDir] = true, true
		for _, p := range []int{o.Port, o.Cluster.Port, o.HTTPPort} {
			if other, dup := ports[p]; dup || p <= 0 {
				t.Errorf("%s: port %d invalid or also used by %s", f, p, other)
			}
			ports[p] = f
		}
		// Every node routes to every cluster listen port.
		for _, g := range clusterFiles {
			want := fmt.Sprintf("127.0.0.1:%d", load(t, g).Cluster.Port)
			found := false
			for _, r := range o.Routes {
				found = found || r.Host == want
			}
			if !found {
				t.Errorf("%s: no route to %s (%s)", f, want, g)
			}
		}
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func start(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	o.NoLog, o.NoSigs = os.Getenv("DEPLOY_TEST_LOGS") == "", true
	o.HTTPPort = 0
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	if !o.NoLog {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatalf("server %s not ready", o.ServerName)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

func TestSingleNodeRuns(t *testing.T) {
	o := load(t, "single-node.conf")
	o.Port, o.StoreDir, o.JetStreamMaxStore = -1, t.TempDir(), 1<<30
	srv := start(t, o)
	nc, js, err := natsdev.Connect(srv.ClientURL(), nats.Name("deploy-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Provision(ctx, js, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxMsgSize() != 1<<20 {
		t.Errorf("max msg size %d, want 1 MiB", s.MaxMsgSize())
	}
}

// TestClusterRunsR3 starts the three nodes (on free ports, temp dirs) and provisions agentlog with
// replicas 3, as deploy/README.md describes.
func TestClusterRunsR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	// The ports are chosen on the command line, as deploy/README.md shows (the flags override the
	// file): nats-server -c nN.conf -p PORT -m HTTP --cluster nats://127.0.0.1:RPORT --routes ...
	clientPort, route := make([]int, 3), make([]int, 3)
	routes := ""
	for i := range clusterFiles {
		clientPort[i], route[i] = freePort(t), freePort(t)
		if i > 0 {
			routes += ","
		}
		routes += fmt.Sprintf("nats-route://127.0.0.1:%d", route[i])
	}
	opts := make([]*server.Options, 3)
	for i, f := range clusterFiles {
		fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
		o, err := server.ConfigureOptions(fs, []string{"-c", f, "-p", strconv.Itoa(clientPort[i]), "-m", strconv.Itoa(freePort(t)),
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", route[i]), "--routes", routes}, nil, nil, nil)
		if err != nil {
			t.Fatalf("nats-server -c %s with port flags: %v", f, err)
		}
		if o.Port != clientPort[i] || o.Cluster.Port != route[i] || len(o.Routes) != 3 {
			t.Fatalf("%s: the flags did not override the file: port %d cluster %d routes %v", f, o.Port, o.Cluster.Port, o.Routes)
		}
		o.StoreDir, o.JetStreamMaxStore = filepath.Join(t.TempDir(), o.ServerName), 1<<30
		opts[i] = o
	}
	var urls string
	for i, o := range opts {
		srv := start(t, o)
		if i > 0 {
			urls += ","
		}
		urls += srv.ClientURL()
	}
	nc, js, err := natsdev.Connect(urls, nats.Name("deploy-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Wait until the cluster has a JetStream meta leader and takes the R3 stream;
	// each try has its own short deadline, as a request to a cluster still forming may get no answer.
	var s *store.Store
	checkfor.Check(t, time.Minute, 200*time.Millisecond, func() error {
		try, cancelTry := context.WithTimeout(ctx, 2*time.Second)
		defer cancelTry()
		var err error
		if s, err = store.Provision(try, js, store.Config{Replicas: 3}); errors.Is(err, store.ErrIncompatible) {
			t.Fatalf("provision --replicas 3: %v", err)
		}
		return err
	})
	info, err := s.Stream().Info(ctx)
	if err != nil || info.Config.Replicas != 3 {
		t.Fatalf("AGENTLOG replicas: %+v, %v", info, err)
	}
	if kv, err := js.Stream(ctx, "KV_"+wire.SessionsBucket); err != nil || kv.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("sessions bucket replicas: %v", err)
	}
	// A guarded append and a read on the replicated stream.
	ev := session.Event{Type: "turn/start", Seq: 0, Time: "1785000000000", Data: []byte(`{"turn":1}`)}
	r, err := storetest.Session(s, "r3").Append(ctx, 0, []session.Event{ev}, store.WithMsgID("r3-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s, "r3").Append(ctx, 0, []session.Event{ev}, store.WithMsgID("r3-other")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second writer on R3: %v, want ErrConflict", err)
	}
	got, last, err := storetest.ReadAll(ctx, storetest.Session(s, "r3"))
	if err != nil || len(got) != 1 || last != r.StreamSeq {
		t.Fatalf("Read on R3: %d events, last %d, %v", len(got), last, err)
	}
	// A projector on the cluster: its lease bucket has the stream's replicas (losing one server
	// must not lose the leases), and it folds the session (read-your-writes through minSeq).
	p, err := projector.New(s, nc, projector.Options{Name: "deploy-r3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop() }()
	if mk, err := js.Stream(ctx, "KV_"+projector.MembersBucket); err != nil || mk.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("members bucket replicas: %v", err)
	}
	qc, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := qc.Messages(ctx, "r3", client.MinSeq(0))
	if err != nil || m.AsOfSeq != 0 {
		t.Fatalf("projection on R3: %+v, %v", m, err)
	}
}
