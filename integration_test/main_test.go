// Package integration_test runs agentlog end to end: it builds the agentlog binary from this module
// (and the fault tests' publisher process, ./writer), starts `agentlog dev` (an embedded
// nats-server with a projector and a forker) as a subprocess, and drives it with the CLI over real
// connections, on the recorded sessions in ../shared/data.
package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binPath string // the agentlog binary built for this run
	devURL  string // the NATS URL of the `agentlog dev` subprocess
	devCmd  *exec.Cmd
	devOut  *syncBuffer
)

// writerPath is the fault tests' publisher process (./writer), built for this run.
var writerPath string

// lifecyclerPath is the lifecycle fault tests' process (./lifecycler), built for this run.
var lifecyclerPath string

// dataDir is the shared recorded data, read through its relative path (never copied).
const dataDir = "../../shared/data"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "agentlog-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binPath, writerPath, lifecyclerPath = filepath.Join(tmp, "agentlog"), filepath.Join(tmp, "writer"), filepath.Join(tmp, "lifecycler")
	build := exec.Command("go", "build", "-o", tmp+string(filepath.Separator), "../cmd/agentlog", "./writer", "./lifecycler")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build agentlog and the writer:", err)
		return 1
	}
	stop, err := startDev(filepath.Join(tmp, "data"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "start agentlog dev:", err)
		if devOut != nil {
			fmt.Fprintln(os.Stderr, devOut.String())
		}
		return 1
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop agentlog dev:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startDev starts `agentlog dev` and waits for its URL line. stop sends SIGINT and waits for a clean exit.
func startDev(data string) (stop func() error, err error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	devCmd = exec.Command(binPath, "dev", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	devOut = &syncBuffer{}
	devCmd.Stderr = devOut
	pr, pw := io.Pipe()
	devCmd.Stdout = pw
	if err := devCmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			devOut.WriteString(line + "\n")
			if i := strings.Index(line, "listening on "); i >= 0 {
				f := strings.Fields(line[i+len("listening on "):])
				if len(f) > 0 {
					select {
					case found <- f[0]:
					default:
					}
				}
			}
		}
	}()
	select {
	case devURL = <-found:
	case <-time.After(60 * time.Second):
		_ = devCmd.Process.Kill()
		return nil, fmt.Errorf("agentlog dev printed no URL within 60s")
	}
	return func() error {
		_ = devCmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- devCmd.Wait() }()
		select {
		case err := <-done:
			pw.Close()
			return err
		case <-time.After(60 * time.Second):
			_ = devCmd.Process.Kill()
			return fmt.Errorf("agentlog dev did not stop within 60s of SIGINT")
		}
	}, nil
}

// syncBuffer is a goroutine-safe bytes.Buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) WriteString(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(p)
}
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is one CLI run.
type result struct {
	code           int
	stdout, stderr string
}

// agentlog runs the binary against the dev server with args and optional stdin.
func agentlog(t testing.TB, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--nats", devURL}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("agentlog %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustAgentlog runs the binary and fails the test unless it exits 0.
func mustAgentlog(t testing.TB, stdin io.Reader, args ...string) string {
	t.Helper()
	r := agentlog(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("agentlog %v: exit %d\nstderr: %s", args, r.code, r.stderr)
	}
	return r.stdout
}
