// Command gen writes a multi-tenant agentlog deployment's configuration under a directory (see
// deploy/multi-tenant/README.md; up.sh runs it): a test CA and certificates, one NATS account per
// tenant with the agent, projector, forker, operator and viewer users, nats.conf, and
//
//	DIR/env.next    (up.sh renames it DIR/env once the deployment is ready) NATS_URL and, per tenant T, T_AGENT_ARGS, T_NATS_ARGS (the agent's agentlog
//	                and nats CLI flags) and T_<ROLE>_ARGS, T_<ROLE>_NATS_ARGS for the other roles
//	DIR/gen.sh      HTTP_URL and TENANTS, for up.sh
//	DIR/deployment.json  every identity's files
//
// Usage: gen -dir DIR [-tenants A,B] [-host 127.0.0.1]. Exit status 0, or 1 with the reason.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
)

func main() {
	dir := flag.String("dir", "", "directory to write into (required)")
	tenants := flag.String("tenants", "A,B", "tenant account names, comma separated")
	host := flag.String("host", "127.0.0.1", "loopback or other address to listen on")
	flag.Parse()
	if err := run(*dir, strings.Split(*tenants, ","), *host); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string, tenants []string, host string) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if abs, err := filepath.Abs(dir); err != nil || strings.ContainsAny(abs, " \t\n*?[]'\"\\$`") {
		// The *_ARGS variables are expanded unquoted ($A_AGENT_ARGS), so paths must be plain words.
		return fmt.Errorf("-dir %q: the path may not contain white space, quotes or shell pattern characters", dir)
	}
	d, err := multitenant.Generate(multitenant.Options{Dir: dir, Tenants: tenants, Host: host})
	if err != nil {
		return err
	}
	var env strings.Builder
	fmt.Fprintf(&env, "# agentlog multi-tenant deployment: . this file, then e.g. agentlog $A_AGENT_ARGS sessions\n")
	// Both: agentlog prefers AGENTLOG_NATS_URL (a shell that exported it for `agentlog dev` would
	// otherwise still point at that server); the nats CLI reads NATS_URL.
	fmt.Fprintf(&env, "export NATS_URL=%s\n", multitenant.ShellQuote(d.URL))
	fmt.Fprintf(&env, "export AGENTLOG_NATS_URL=%s\n", multitenant.ShellQuote(d.URL))
	for _, t := range d.Tenants {
		T := strings.ToUpper(t)
		for _, r := range multitenant.Roles {
			id := d.Identity(t, r)
			name := T + "_" + strings.ToUpper(string(r))
			if r == multitenant.Agent {
				name = T + "_AGENT"
				fmt.Fprintf(&env, "%s_NATS_ARGS=%s\n", T, multitenant.ShellQuote(strings.Join(id.NatsArgs(d), " ")))
			} else {
				fmt.Fprintf(&env, "%s_NATS_ARGS=%s\n", name, multitenant.ShellQuote(strings.Join(id.NatsArgs(d), " ")))
			}
			fmt.Fprintf(&env, "%s_ARGS=%s\n", name, multitenant.ShellQuote(strings.Join(id.AgentlogArgs(d), " ")))
		}
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "env.next"), []byte(env.String()), 0o600); err != nil {
		return err
	}
	gen := fmt.Sprintf("HTTP_URL=%s\nTENANTS=%s\n", multitenant.ShellQuote(d.HTTPURL), multitenant.ShellQuote(strings.ToLower(strings.Join(d.Tenants, " "))))
	if err := os.WriteFile(filepath.Join(d.Dir, "gen.sh"), []byte(gen), 0o600); err != nil {
		return err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.Dir, "deployment.json"), b, 0o600)
}
