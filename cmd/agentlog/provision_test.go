package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestProvisionAgainKeepsReplicas: on an R3 cluster, provision run again without --replicas (or
// --partitions) keeps what exists and succeeds (it failed, asking for 1 replica); with a value
// that differs it is refused, naming the setting.
func TestProvisionAgainKeepsReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	urls := startCluster3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// The cluster elects its JetStream meta leader in its own time: retry the first provision.
	var code int
	var out, errOut string
	checkfor.Check(t, 60*time.Second, 200*time.Millisecond, func() error {
		if code, out, errOut = runCLI(ctx, urls, "--timeout", "5s", "provision", "--replicas", "3", "--partitions", "4"); code != 0 {
			return fmt.Errorf("provision --replicas 3: exit %d %s %s", code, out, errOut)
		}
		return nil
	})
	if !strings.Contains(out, "(4 partitions, 3 replicas)") {
		t.Fatalf("provision --replicas 3: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := runCLI(ctx, urls, "provision"); code != 0 || !strings.Contains(out, "(4 partitions, 3 replicas)") {
		t.Fatalf("provision again without flags: exit %d %s %s", code, out, errOut)
	}
	// A bucket lost (or added by a later version) is created again with the stream's replicas.
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, wire.ProjectionsBucket); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(ctx, urls, "provision"); code != 0 {
		t.Fatalf("provision after a lost bucket: exit %d %s %s", code, out, errOut)
	}
	if kv, err := js.KeyValue(ctx, wire.ProjectionsBucket); err != nil {
		t.Fatal(err)
	} else if st, err := kv.Status(ctx); err != nil || st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Fatalf("the bucket provision made again: %v %v, want 3 replicas", st, err)
	}
	if code, _, errOut := runCLI(ctx, urls, "provision", "--replicas", "3"); code != 0 {
		t.Fatalf("provision again --replicas 3: exit %d %s", code, errOut)
	}
	if code, _, errOut := runCLI(ctx, urls, "provision", "--replicas", "1"); code != 1 || !strings.Contains(errOut, "replicas") {
		t.Fatalf("provision --replicas 1 on R3: exit %d %s, want 1 naming replicas", code, errOut)
	}
}

// startCluster3 starts the three nodes of deploy/cluster-3-node on free ports (given as the
// command-line flags deploy/README.md shows) and temp dirs, and returns their client URLs.
func startCluster3(t *testing.T) string {
	t.Helper()
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	clientPorts, routePorts := []int{free(), free(), free()}, []int{free(), free(), free()}
	routes := ""
	for i, p := range routePorts {
		if i > 0 {
			routes += ","
		}
		routes += fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	var urls []string
	for i := range 3 {
		fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
		o, err := server.ConfigureOptions(fs, []string{"-c", fmt.Sprintf("../../deploy/cluster-3-node/n%d.conf", i+1),
			"-p", strconv.Itoa(clientPorts[i]), "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]), "--routes", routes}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		o.HTTPPort, o.NoLog, o.NoSigs = 0, true, true
		o.StoreDir, o.JetStreamMaxStore = t.TempDir(), 1<<30
		srv, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(20 * time.Second) {
			srv.Shutdown()
			t.Fatalf("node %d not ready", i+1)
		}
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		urls = append(urls, srv.ClientURL())
	}
	return strings.Join(urls, ",")
}
