// pcbench compares, on one embedded nats-server (R1, file storage), the transports a partitioned
// projector can use: (A) one durable pull consumer per partition with a pinned-client priority
// group (agentlog's choice) and (B) orbit.go pcgroups elastic consumer groups. Static pcgroups
// need the partition number as the FIRST subject token; agentlog's subjects are
// agentlog.session.<partition>.<token>, so static groups cannot run on the AGENTLOG stream as is.
package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
)

const parts = 16

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func main() {
	n := 50000
	dir, _ := os.MkdirTemp("", "pcbench")
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	must(err)
	go srv.Start()
	srv.ReadyForConnections(10 * time.Second)
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL())
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "AGENTLOG", Subjects: []string{"agentlog.session.>"}, Storage: jetstream.FileStorage})
	must(err)
	body := []byte(strings.Repeat("x", 512))
	t0 := time.Now()
	for i := 0; i < n; i++ {
		tok := fmt.Sprintf("s%04d", i%1000)
		h := fnv.New32a()
		h.Write([]byte(tok))
		_, err := js.PublishAsync(fmt.Sprintf("agentlog.session.%d.%s", h.Sum32()%parts, tok), body)
		must(err)
	}
	<-js.PublishAsyncComplete()
	fmt.Printf("prefill: %d records in %v\n", n, time.Since(t0).Round(time.Millisecond))

	// (A) pinned priority groups, one consumer per partition, one instance.
	t0 = time.Now()
	var got atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		cons, err := js.CreateOrUpdateConsumer(ctx, "AGENTLOG", jetstream.ConsumerConfig{
			Durable: fmt.Sprintf("pinned-%d", p), FilterSubject: fmt.Sprintf("agentlog.session.%d.*", p),
			AckPolicy: jetstream.AckExplicitPolicy, PriorityPolicy: jetstream.PriorityPolicyPinned,
			PriorityGroups: []string{"g"}, PinnedTTL: 4 * time.Second, AckWait: 4 * time.Second})
		must(err)
		info, _ := cons.Info(ctx)
		want := int64(info.NumPending)
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := cons.Messages(jetstream.PullMaxMessages(512), jetstream.PullPriorityGroup("g"))
			must(err)
			defer it.Stop()
			for k := int64(0); k < want; k++ {
				m, err := it.Next()
				must(err)
				_ = m.Ack()
				got.Add(1)
			}
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	fmt.Printf("A pinned priority groups (16 consumers, 1 instance): %d records in %v = %.0f records/s\n", got.Load(), d.Round(time.Millisecond), float64(got.Load())/d.Seconds())

	// (B) pcgroups elastic: the records are sourced into a work-queue stream, then consumed.
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "elastic-consumer-groups"})
	must(err)
	t0 = time.Now()
	_, err = pcgroups.CreateElastic(ctx, js, "AGENTLOG", "cg", parts, []pcgroups.PartitioningFilter{{Filter: "agentlog.session.*.*", PartitioningWildcards: []int{2}}}, 0, 0)
	must(err)
	_, err = pcgroups.AddMembers(ctx, js, "AGENTLOG", "cg", []string{"m1"})
	must(err)
	var egot atomic.Int64
	done := make(chan struct{})
	cc, err := pcgroups.ElasticConsume(ctx, js, "AGENTLOG", "cg", "m1", func(m jetstream.Msg) {
		_ = m.Ack()
		if egot.Add(1) == int64(n) {
			close(done)
		}
	}, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, AckWait: 4 * time.Second})
	must(err)
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		fmt.Println("elastic: timeout")
	}
	d = time.Since(t0)
	fmt.Printf("B pcgroups elastic (1 member): %d records in %v = %.0f records/s (includes sourcing into the work queue)\n", egot.Load(), d.Round(time.Millisecond), float64(egot.Load())/d.Seconds())
	cc.Stop()

	// Failover of B: two instances of member m2 (hot standby); the pinned one's connection dies.
	_, err = pcgroups.DeleteMembers(ctx, js, "AGENTLOG", "cg", []string{"m1"})
	must(err)
	_, err = pcgroups.AddMembers(ctx, js, "AGENTLOG", "cg", []string{"m2"})
	must(err)
	type inst struct {
		nc  *nats.Conn
		cnt atomic.Int64
	}
	var insts [2]*inst
	for i := range insts {
		c, _ := nats.Connect(srv.ClientURL())
		j, _ := jetstream.New(c)
		in := &inst{nc: c}
		insts[i] = in
		_, err := pcgroups.ElasticConsume(ctx, j, "AGENTLOG", "cg", "m2", func(m jetstream.Msg) { _ = m.Ack(); in.cnt.Add(1) },
			jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy, AckWait: 4 * time.Second})
		must(err)
	}
	time.Sleep(2 * time.Second)
	stop := make(chan struct{})
	go func() { // steady traffic, 200 records/s
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			js.PublishAsync(fmt.Sprintf("agentlog.session.%d.f%d", i%parts, i%50), body)
		}
	}()
	var active, standby *inst
	for active == nil {
		time.Sleep(100 * time.Millisecond)
		for i, in := range insts {
			if in.cnt.Load() > 0 {
				active, standby = in, insts[1-i]
			}
		}
	}
	killed := time.Now()
	active.nc.Close()
	base := standby.cnt.Load()
	for standby.cnt.Load() == base && time.Since(killed) < 60*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("B failover (standby instance of the same member takes over after the active one's connection dies): %v\n", time.Since(killed).Round(time.Millisecond))
	close(stop)
}
