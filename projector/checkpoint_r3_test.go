package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// startCluster starts n embedded nats-servers with JetStream clustered over routes and returns
// their client URLs; they are shut down at cleanup. Client ports are the OS's choice; the route
// ports are free ports picked first, as every server must know the others' (as
// deploy.TestClusterRunsR3 does).
func startCluster(t *testing.T, n int) string {
	t.Helper()
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))})
	}
	srvs := make([]*server.Server, n)
	for i := range srvs {
		o := &server.Options{
			ServerName: fmt.Sprintf("r%d-%d", n, i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 1 << 30, JetStreamMaxMemory: 64 << 20,
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "agentlog-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		srv, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		srvs[i] = srv
	}
	urls := make([]string, 0, n)
	for _, srv := range srvs {
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", srv.Name())
		}
		urls = append(urls, srv.ClientURL())
	}
	return strings.Join(urls, ",")
}

// provisionR3 provisions the store with 3 replicas once the cluster has a JetStream meta leader
// (each try with a short deadline: a request to a cluster still forming may get no answer).
func provisionR3(t *testing.T, urls string) *store.Store {
	t.Helper()
	_, js, err := natsdev.Connect(urls, nats.Name("checkpoint-r3"))
	if err != nil {
		t.Fatal(err)
	}
	var st *store.Store
	// The cluster is forming: no condition to wait on but the next try.
	checkfor.Check(t, 60*time.Second, 200*time.Millisecond, func() error {
		try, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var err error
		if st, err = store.Provision(try, js, store.Config{Replicas: 3}); errors.Is(err, store.ErrIncompatible) {
			t.Fatalf("provision --replicas 3: %v", err)
		}
		return err
	})
	return st
}

// TestCheckpointConflictR3: two projectors checkpoint the same session's keys at once on a 3-node
// R3 cluster. One write of each key wins; the other is a revision conflict, reported as one (the
// session is reloaded and written again), never as a transient failure. On a replicated
// stream the losing guarded publish is often refused with 10164 (a publish to the subject is in
// flight) rather than 10071; both are the same conflict (store.IsWrongLastSequence).
func TestCheckpointConflictR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	st := provisionR3(t, startCluster(t, 3))
	c := ctx(t)
	const id = "r3-checkpoint"
	if err := st.CreateSession(c, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token(id)
	reg, _ := NewRegistry()
	defs := reg.list()
	// Two connections, as two projector processes have.
	js := make([]*store.Store, 2)
	for i := range js {
		_, j, err := natsdev.Connect(st.JetStream().Conn().ConnectedUrl(), nats.Name("projector-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		defer j.Conn().Close()
		if js[i], err = store.Open(c, j); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	const rounds = 12
	for round := range rounds {
		ev := userMsg(int64(round), fmt.Sprintf("m%d", round), fmt.Sprintf("round %d", round))
		res, err := storetest.Session(st, id).Append(c, last, []session.Event{ev})
		if err != nil {
			t.Fatal(err)
		}
		last = res.StreamSeq
		// Both projectors load the session at the same revisions and fold the new record.
		copies := make([]*sessState, 2)
		for i := range copies {
			if copies[i], err = loadSession(c, js[i], defs, tok, id); err != nil {
				t.Fatal(err)
			}
			if err := foldEvents(c, js[i], copies[i], scanAll([]session.Event{ev}), last); err != nil {
				t.Fatal(err)
			}
			if !copies[i].dirty || copies[i].gate().asOfSeq != int64(round) {
				t.Fatalf("round %d: copy %d not folded to seq %d", round, i, round)
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		conflicts := make([][]*sessState, 2)
		errs := make([]error, 2)
		for i := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				conflicts[i], errs[i] = writeSessions(c, js[i].JetStream(), []*sessState{copies[i]})
			}()
		}
		close(start)
		wg.Wait()
		for i := range copies {
			if errs[i] != nil {
				t.Fatalf("round %d: projector %d: the checkpoint failed (%v); a concurrent write of the same keys is a conflict, not a failure", round, i, errs[i])
			}
		}
		// Each key is won by one of them (not always the same one for every key): at least one
		// reports a conflict.
		if len(conflicts[0])+len(conflicts[1]) == 0 {
			t.Fatalf("round %d: both checkpoints of the same keys at the same revisions succeeded", round)
		}
	}
	// What is stored is a state of the whole log.
	e, err := storetest.ProjectionsKV(js[0]).Get(c, wire.ProjectionKey(UnitMessages, tok))
	if err != nil {
		t.Fatal(err)
	}
	var v storedValue
	if err := json.Unmarshal(e.Value(), &v); err != nil || v.AsOfSeq != rounds-1 {
		t.Fatalf("stored messages state: asOfSeq %d, %v; want %d", v.AsOfSeq, err, rounds-1)
	}
}
