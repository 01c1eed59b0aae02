// Package dshpersistence_test runs the TypeScript package @agentlog/dsh-session-persistence
// (this directory) against a real agentlog stack: it builds ./cmd/agentlog and the Go writer process
// of the race test (./integration_test/writer), starts `agentlog dev` on a free port, and runs the
// package's `npm test` with AGENTLOG_NATS_URL, AGENTLOG_BIN and AGENTLOG_WRITER_BIN set.
// The vitest suites are the reference's two contract suites, the Go/TS interop tests, the
// two-writer race and a scripted dsh session.
//
// It skips, saying why, when npm or the package's dependencies are missing (run `npm ci` in this
// directory, as .ci/run does); under CI=true it fails instead.
package dshpersistence_test

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
	"regexp"
	"strings"
	"testing"
	"time"
)

func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the TypeScript package cannot be tested: %s", msg)
	}
	t.Skipf("skipping the TypeScript package's tests: %s", msg)
}

func TestNpm(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		unavailable(t, "npm is not on PATH (install Node.js and npm)")
	}
	pkg, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pkg, "../../../shared/dsh-contract/tests/contract.ts")); err != nil {
		unavailable(t, "the contract suites in ../shared/dsh-contract are missing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pkg, "node_modules/.bin/vitest")); err != nil {
		unavailable(t, "the package's dependencies are not installed: run `npm ci` in typescript/dsh-persistence (as .ci/run does)")
	}
	if _, err := os.Stat(filepath.Join(pkg, "node_modules/.bin/node")); err != nil {
		unavailable(t, "node_modules/.bin/node (the node@22 devDependency) is missing: run `npm ci` in typescript/dsh-persistence")
	}

	tmp := t.TempDir()
	bin, writer := filepath.Join(tmp, "agentlog"), filepath.Join(tmp, "writer")
	build := exec.Command("go", "build", "-o", tmp+string(filepath.Separator), "./cmd/agentlog", "./integration_test/writer")
	build.Dir = filepath.Join(pkg, "../..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/agentlog ./integration_test/writer: %v\n%s", err, out)
	}
	url, stop := startDev(t, bin, filepath.Join(tmp, "data"))
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "test")
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "AGENTLOG_NATS_URL="+url, "AGENTLOG_BIN="+bin, "AGENTLOG_WRITER_BIN="+writer, "FORCE_COLOR=0", "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	summary := regexp.MustCompile(`(?m)^\s*(Test Files|Tests)\s+.*$`).FindAllString(out.String(), -1)
	for _, s := range summary {
		t.Log(strings.TrimSpace(s))
	}
	if err != nil {
		t.Fatalf("npm test (AGENTLOG_NATS_URL=%s): %v\n%s", url, err, tail(out.String(), 20000))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// startDev runs `agentlog dev` on a free loopback port and returns its URL; stop sends SIGINT and
// waits for the process to exit.
func startDev(t *testing.T, bin, data string) (string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "dev", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if i := strings.Index(line, "listening on "); i >= 0 {
				if f := strings.Fields(line[i+len("listening on "):]); len(f) > 0 {
					select {
					case found <- f[0]:
					default:
					}
				}
			}
		}
	}()
	var url string
	select {
	case url = <-found:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("agentlog dev printed no URL within 60s\n%s", stderr.String())
	}
	return url, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agentlog dev: %v", err)
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("agentlog dev did not stop within 60s of SIGINT")
		}
		pw.Close()
	}
}
