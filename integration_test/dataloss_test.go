package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	natsjs "github.com/nats-io/nats.go/jetstream"
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

// TestReadersSeeDataLoss: a session's records disappear after the projector folded them, by a
// purge outside agentlog or by a server that comes back with a block cut short. `messages` then
// refuses, naming the session and the seqs (exit 1), instead of answering [] (or a shorter
// history) as if nothing had happened; `status` shows the loss and exits 1 too; `messages
// --allow-data-loss` answers what the log holds.
func TestReadersSeeDataLoss(t *testing.T) {
	for _, c := range []struct {
		name    string
		lastSeq int64 // the log's last seq after the loss
		lose    func(t *testing.T, url, data, id string, dev **proc, port int)
	}{
		{"purged outside agentlog", -1, func(t *testing.T, url, _, id string, _ **proc, _ int) {
			nc, st := connectStore(t, url, nil)
			defer nc.Close()
			subject := storetest.Session(st, id).Subject()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := st.Stream().Purge(ctx, natsjs.WithPurgeSubject(subject)); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated block", 19, func(t *testing.T, _, data, _ string, dev **proc, port int) {
			(*dev).interrupt(t)
			dir := streamDir(t, data)
			blks, _ := filepath.Glob(filepath.Join(dir, "msgs", "*.blk"))
			if len(blks) == 0 {
				t.Fatal("no block")
			}
			fi, err := os.Stat(blks[len(blks)-1])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(blks[len(blks)-1], fi.Size()-100); err != nil { // into the last record
				t.Fatal(err)
			}
			*dev = devAt(t, data, port, 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			url := fmt.Sprintf("nats://127.0.0.1:%d", port)
			dev := devAt(t, data, port, 1)
			const id = "lossy"
			// Two records, so that a block cut short keeps the first.
			func() {
				nc, st := connectStore(t, url, nil)
				defer nc.Close()
				p := newPublisher(t, st, nc, publisher.Options{Logger: quietLogger()})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
				if err != nil {
					t.Fatal(err)
				}
				evs := userEvents("kept", 0, 40)
				for i, ev := range evs {
					if err := w.Append(ev); err != nil {
						t.Fatal(err)
					}
					if i == 19 || i == 39 {
						if err := w.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := p.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}()
			var before []json.RawMessage
			if err := json.Unmarshal([]byte(mustAt(t, url, nil, "messages", id)), &before); err != nil || len(before) != 40 {
				t.Fatalf("messages before the loss: %d, %v", len(before), err)
			}
			c.lose(t, url, data, id, &dev, port)

			r := runAt(t, url, nil, "status", id, "--json")
			var s struct {
				LastSeq  int64 `json:"lastSeq"`
				DataLoss *struct {
					FromSeq int64 `json:"fromSeq"`
					ToSeq   int64 `json:"toSeq"`
				} `json:"dataLoss"`
			}
			if r.code != 1 || json.Unmarshal([]byte(r.stdout), &s) != nil || s.DataLoss == nil || s.LastSeq != c.lastSeq ||
				s.DataLoss.ToSeq != 39 || s.DataLoss.FromSeq != c.lastSeq+1 || !strings.Contains(r.stderr, "lost acknowledged records") {
				t.Fatalf("status after the loss: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			r = runAt(t, url, nil, "messages", id)
			if r.code != 1 || !strings.Contains(r.stderr, `session "lossy" lost acknowledged records`) ||
				!strings.Contains(r.stderr, fmt.Sprintf("seqs %d..39 ", c.lastSeq+1)) || !strings.Contains(r.stderr, "code 424") {
				t.Fatalf("messages after the loss: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			r = runAt(t, url, nil, "messages", id, "--allow-data-loss", "--min-seq", "-1")
			var after []json.RawMessage
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &after) != nil || int64(len(after)) != s.LastSeq+1 {
				t.Fatalf("messages --allow-data-loss: exit %d (%d messages, the log ends at seq %d)\nstderr %s", r.code, len(after), s.LastSeq, r.stderr)
			}
			dev.interrupt(t)
		})
	}
}
