package multitenant

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ViolationLog is a nats-server logger that keeps the permission violations the server logs (and
// drops every other line).
type ViolationLog struct {
	mu    sync.Mutex
	lines []string
}

// Errorf keeps the line when it reports a permission violation.
func (l *ViolationLog) Errorf(format string, v ...any) {
	if m := fmt.Sprintf(format, v...); strings.Contains(m, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, m)
		l.mu.Unlock()
	}
}

// Noticef drops the line.
func (l *ViolationLog) Noticef(string, ...any) {}

// Warnf drops the line.
func (l *ViolationLog) Warnf(string, ...any) {}

// Fatalf drops the line.
func (l *ViolationLog) Fatalf(string, ...any) {}

// Debugf drops the line.
func (l *ViolationLog) Debugf(string, ...any) {}

// Tracef drops the line.
func (l *ViolationLog) Tracef(string, ...any) {}

// Since returns the violations logged after the first n (Since(0): all of them).
func (l *ViolationLog) Since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[min(n, len(l.lines)):]...)
}

// RoleServer starts an embedded nats-server, its JetStream store under dir, with one account T
// whose users are the roles given, named after them, each with its RolePermissions for a stream
// of partitions partitions, and password "pw" (Operator: every right). Its logger is the returned
// ViolationLog. The caller shuts the server down. For tests that a library's path works within a
// role's rights.
func RoleServer(dir string, partitions int, roles ...Role) (*server.Server, *ViolationLog, error) {
	var users []string
	for _, r := range roles {
		p, err := RolePermissions(r, partitions)
		if err != nil {
			return nil, nil, err
		}
		users = append(users, fmt.Sprintf("      { user: %q, password: pw, permissions: %s }", r, p.conf("      ")))
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\naccounts {\n  T {\n    jetstream: enabled\n    users: [\n%s\n    ]\n  }\n}\n",
		filepath.Join(dir, "data"), strings.Join(users, "\n"))
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return nil, nil, err
	}
	opts, err := server.ProcessConfigFile(cf)
	if err != nil {
		return nil, nil, fmt.Errorf("role server config: %w\n%s", err, conf)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, err
	}
	log := &ViolationLog{}
	srv.SetLogger(log, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, nil, fmt.Errorf("role server: nats-server not ready after 10s")
	}
	return srv, log, nil
}
