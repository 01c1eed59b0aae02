package integration_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
)

// devNoServices starts `agentlog dev --projectors 0 --forkers 0` on data and port.
func devNoServices(t *testing.T, data string, port int) *proc {
	t.Helper()
	p := startProc(t, "dev", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--projectors", "0", "--forkers", "0")
	p.waitOutput(t, "listening on", 60*time.Second)
	return p
}

// forkUntil retries `agentlog fork src` until it succeeds, failing the test after limit; it
// returns the time taken.
func forkUntil(t *testing.T, url, src string, limit time.Duration, logs *proc) time.Duration {
	t.Helper()
	start := time.Now()
	checkfor.Check(t, limit, 50*time.Millisecond, func() error {
		r := runAt(t, url, nil, "--timeout", "2s", "fork", src, "--json")
		if r.code != 0 {
			return fmt.Errorf("no fork of %s: %s\nforker:\n%s", src, r.stderr, logs.out.String())
		}
		var res struct {
			Child      string `json:"child"`
			SeedLength int    `json:"seedLength"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Child == "" {
			t.Fatalf("fork %s: %q: %v", src, r.stdout, err)
		}
		return nil
	})
	return time.Since(start)
}

// TestSeparateForkerSurvivesServerRestart: `agentlog dev --projectors 0 --forkers 0` with a
// separate `agentlog forker`; dev is stopped (SIGINT, SIGKILL) and started again on the same data,
// then on an empty data dir (a server that lost all its state): a fork succeeds within 10 s of the
// server being back, and the forker logs each change of state once.
func TestSeparateForkerSurvivesServerRestart(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	data, url := t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", port)
	dev := devNoServices(t, data, port)
	fk := startProc(t, "--nats", url, "forker")
	fk.waitOutput(t, "running on", 60*time.Second)
	importAt(t, url, "src", userLines("src", 0, 3))
	forkUntil(t, url, "src", 10*time.Second, fk)

	for _, c := range []struct {
		name string
		stop func()
		lost bool // restarted on an empty data dir
	}{
		{"SIGINT", func() { dev.interrupt(t) }, false},
		{"SIGKILL", func() { dev.kill9() }, false},
		{"state lost", func() { dev.kill9() }, true},
	} {
		mark := len(fk.out.String())
		c.stop()
		fk.waitOutputFrom(t, mark, "connection to NATS lost", 60*time.Second) // the forker sees the server gone
		at := data
		if c.lost {
			at = t.TempDir()
		}
		dev = devNoServices(t, at, port)
		back := time.Now()
		if c.lost {
			importAt(t, url, "src", userLines("src", 0, 3)) // dev provisioned again; the source is new
		}
		forkUntil(t, url, "src", 10*time.Second, fk)
		t.Logf("%s: first fork %s after the server was back", c.name, time.Since(back).Round(time.Millisecond))
		// A sleep, not a condition: it gives a wrong forker the time to log the change twice.
		time.Sleep(3 * time.Second)
		out := fk.out.String()[mark:]
		if fk.exited() {
			t.Fatalf("%s: the forker exited:\n%s", c.name, fk.out.String())
		}
		if n := strings.Count(out, "level=WARN"); n != 1 {
			t.Fatalf("%s: %d warnings for the restart, want one (the connection lost):\n%s", c.name, n, out)
		}
		if n := strings.Count(out, "reconnected"); n != 1 {
			t.Fatalf("%s: %d reconnect lines, want one:\n%s", c.name, n, out)
		}
		t.Logf("%s: forker log:\n%s", c.name, out)
	}
	dev.interrupt(t)
}
