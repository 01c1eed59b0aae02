package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestFollowNoGap follows a session while a writer appends to it, before and during the follow:
// every event is handed over once, in order, with no gap and no duplicate, and no consumer is
// created on the stream (a follow reads by direct get, woken by a core subscription).
func TestFollowNoGap(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	ss := sessionOf(s, "follow")
	var tail uint64
	next := int64(0)
	appendN := func(n int) {
		for range n {
			k := 1 + next%3
			r, err := ss.Append(ctx, tail, evs(next, next+k, "f"))
			if err != nil {
				t.Error(err)
				return
			}
			tail, next = r.StreamSeq, next+k
		}
	}
	appendN(300) // more than one batch before the follow starts

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var got []session.Event
	seen := make(chan int64, 4096)
	done := make(chan error, 1)
	go func() {
		_, err := ss.Records(fctx, func(r Record) error {
			mu.Lock()
			got = append(got, r.Events...)
			mu.Unlock()
			seen <- r.Events[len(r.Events)-1].Seq
			return nil
		}, Follow())
		done <- err
	}()
	appendN(200) // while the follow reads the first ones, and after
	want := next - 1
	for last := int64(-1); last < want; {
		select {
		case last = <-seen:
		case err := <-done:
			t.Fatalf("the follow ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("the follow reached seq %d, want %d", last, want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the follow ended with %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if int64(len(got)) != next {
		t.Fatalf("the follow handed %d events, want %d", len(got), next)
	}
	for i, e := range got {
		if e.Seq != int64(i) {
			t.Fatalf("event %d has seq %d (a gap or a duplicate)", i, e.Seq)
		}
	}
	if n := readerConsumers(t, s); n != 0 {
		t.Fatalf("%d consumers on the stream after a follow, want none", n)
	}
}

// readerConsumers counts the consumers of the session stream other than the projectors'
// partition consumers (which Provision creates).
func readerConsumers(t testing.TB, s *Store) int {
	t.Helper()
	n := 0
	names := s.stream.ConsumerNames(testCtx(t))
	for name := range names.Name() {
		if !strings.HasPrefix(name, ProjectorConsumerPrefix+"-") {
			n++
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReadAfterWriteR3 appends to a session of an R3 stream and reads it right away, through a
// connection to each server in turn: every read holds every record acked before it started,
// although the direct gets it makes may be answered by a follower behind the leader.
func TestReadAfterWriteR3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	urls := startTestCluster(t, 3)
	w := provisionTestR3(t, urls[0])
	ctx := testCtx(t)
	readers := make([]*Store, len(urls))
	for i, u := range urls {
		_, js, err := natsdev.Connect(u, nats.Name(fmt.Sprintf("r3-reader-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if readers[i], err = Open(ctx, js); err != nil {
			t.Fatalf("Open through %s: %v", u, err)
		}
	}
	ss := sessionOf(w, "r3")
	var tail uint64
	next := int64(0)
	for i := range 60 {
		r, err := ss.Append(ctx, tail, evs(next, next+2, "r3"))
		if err != nil {
			t.Fatal(err)
		}
		tail, next = r.StreamSeq, next+2
		got, last, err := readAll(ctx, sessionOf(readers[i%len(readers)], "r3"))
		if err != nil {
			t.Fatalf("read after append %d: %v", i, err)
		}
		if last < tail || int64(len(got)) < next {
			t.Fatalf("read right after append %d through %s: %d events up to stream seq %d; want %d up to %d", i, urls[i%len(urls)], len(got), last, next, tail)
		}
	}
}

// startTestCluster starts n embedded nats-servers with JetStream clustered over routes and
// returns their client URLs (as projector's TestCheckpointConflictR3 does).
func startTestCluster(t *testing.T, n int) []string {
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
	var urls []string
	for i := range ports {
		o := &server.Options{
			ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 1 << 30, JetStreamMaxMemory: 64 << 20,
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "store-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		srv, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", srv.Name())
		}
		urls = append(urls, srv.ClientURL())
	}
	return urls
}

// provisionTestR3 provisions the store with 3 replicas once the cluster has a meta leader (each
// try with a short deadline: a request to a cluster still forming may get no answer).
func provisionTestR3(t *testing.T, u string) *Store {
	t.Helper()
	_, js, err := natsdev.Connect(u, nats.Name("r3-writer"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		try, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		st, err := Provision(try, js, Config{Replicas: 3})
		cancel()
		if err == nil {
			return st
		}
		if errors.Is(err, ErrIncompatible) || time.Now().After(deadline) {
			t.Fatalf("provision --replicas 3: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // the cluster is forming: no condition to wait on but the next try
	}
}

// TestFollowAll follows every session while writers append to three: each record stored after
// the follow began is handed once, in stream order, and none stored before it.
func TestFollowAll(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	tails := map[string]uint64{}
	nexts := map[string]int64{}
	appendTo := func(id string) uint64 {
		ss := sessionOf(s, id)
		r, err := ss.Append(ctx, tails[id], evs(nexts[id], nexts[id]+1, id))
		if err != nil {
			t.Fatal(err)
		}
		tails[id], nexts[id] = r.StreamSeq, nexts[id]+1
		return r.StreamSeq
	}
	before := appendTo("a")
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan uint64, 1024)
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		close(ready)
		done <- s.FollowAll(fctx, func(m *natsjs.RawStreamMsg) error {
			got <- m.Sequence
			return nil
		})
	}()
	<-ready
	// FollowAll starts after the stream's last message when it starts: wait until it has (its
	// subscription is then in place), by appending until a record arrives.
	var first uint64
	for first == 0 {
		seq := appendTo("a")
		select {
		case first = <-got:
			if first <= before {
				t.Fatalf("FollowAll handed stream seq %d, stored before it began (%d)", first, before)
			}
			if first != seq {
				// an earlier probe arrived: take the later ones in order below
				for first < seq {
					if n := <-got; n <= first {
						t.Fatalf("FollowAll handed stream seq %d after %d", n, first)
					} else {
						first = n
					}
				}
			}
		case <-time.After(50 * time.Millisecond): // not following yet: append another probe
		}
	}
	var want []uint64
	for i := range 150 {
		want = append(want, appendTo([]string{"a", "b", "c"}[i%3]))
	}
	for i, w := range want {
		select {
		case n := <-got:
			if n != w {
				t.Fatalf("record %d: FollowAll handed stream seq %d, want %d (in order, once)", i, n, w)
			}
		case err := <-done:
			t.Fatalf("FollowAll ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("FollowAll handed %d of %d records", i, len(want))
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("FollowAll ended with %v", err)
	}
	if n := readerConsumers(t, s); n != 0 {
		t.Fatalf("%d consumers after FollowAll", n)
	}
}
