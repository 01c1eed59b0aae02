package integration_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// noteLog is a dsh JSONL log (no header) of n ignorable notes.
func noteLog(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"type":"test/note","seq":%d,"time":1785000000000,"data":{"i":%d},"ignorable":true}`+"\n", i, i)
	}
	return []byte(b.String())
}

// streamDir is the AGENTLOG stream's directory in a dev data directory.
func streamDir(t *testing.T, data string) string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(data, "jetstream", "*", "streams", "AGENTLOG"))
	if len(dirs) != 1 {
		t.Fatalf("stream directory of AGENTLOG under %s: %v", data, dirs)
	}
	return dirs[0]
}

// TestDevLogsServerDataLoss: `agentlog dev` restarted on data the server finds damaged says so on
// its log: the embedded server's warnings about the stream (a block cut short; a metafile that
// does not check, for which the server discards the whole stream) are forwarded, and a stream
// discarded while agentlog_sessions still names sessions is reported as their records lost.
func TestDevLogsServerDataLoss(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   []string
	}{
		{"truncated block", func(t *testing.T, dir string) {
			blks, _ := filepath.Glob(filepath.Join(dir, "msgs", "*.blk"))
			if len(blks) == 0 {
				t.Fatal("no block")
			}
			fi, err := os.Stat(blks[len(blks)-1])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(blks[len(blks)-1], fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, []string{"level=WARN", "nats-server: Filestore [AGENTLOG]"}},
		{"discarded stream", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "meta.inf"), []byte("{not the metafile"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, []string{"level=WARN", "checksums do not match", "level=ERROR", "records are lost"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			url := fmt.Sprintf("nats://127.0.0.1:%d", port)
			dev := devAt(t, data, port, 0)
			for i := range 4 {
				importAt(t, url, fmt.Sprintf("lossy-%d", i), noteLog(200))
			}
			dev.interrupt(t)
			c.damage(t, streamDir(t, data))
			dev = devAt(t, data, port, 0)
			log := dev.out.String()
			for _, w := range c.want {
				if !strings.Contains(log, w) {
					t.Fatalf("agentlog dev's log after the damage lacks %q:\n%s", w, log)
				}
			}
			dev.interrupt(t)
		})
	}
}
