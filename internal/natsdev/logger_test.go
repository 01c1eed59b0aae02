package natsdev_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/store"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServerLoggerReportsDataLoss: the embedded server's warnings reach ServerOptions.Logger: a
// stream block cut short (acknowledged records lost at a crash) and a stream whose metafile does
// not check (the server discards the whole stream) are both reported, at Warn, naming the stream.
func TestServerLoggerReportsDataLoss(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, streamDir string)
		want   string
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
		}, "Filestore [AGENTLOG]"},
		{"corrupt metafile", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "meta.inf"), []byte("{not the metafile"), 0o640); err != nil {
				t.Fatal(err)
			}
		}, "checksums do not match"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			nc, js, err := natsdev.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t)
			st, err := store.Provision(ctx, js, store.Config{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				ss, err := st.Session("s" + string(rune('a'+i)))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ss.Append(ctx, 0, notes(50)); err != nil {
					t.Fatal(err)
				}
			}
			nc.Close()
			srv.Shutdown()
			srv.WaitForShutdown()
			streams, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "AGENTLOG"))
			if len(streams) != 1 {
				t.Fatalf("stream directory: %v", streams)
			}
			c.damage(t, streams[0])

			var logged lockedBuffer
			srv, err = natsdev.RunServer(natsdev.ServerOptions{DataDir: dir,
				Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatal(err)
			}
			srv.Shutdown()
			srv.WaitForShutdown()
			out := logged.String()
			if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "nats-server: ") || !strings.Contains(out, c.want) {
				t.Fatalf("the server's log, forwarded:\n%s\nwant a warning with %q", out, c.want)
			}
			if strings.Contains(out, "level=DEBUG") || strings.Contains(out, "level=INFO") {
				t.Fatalf("notices at Warn level:\n%s", out)
			}
		})
	}
}
