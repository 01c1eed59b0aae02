package multitenant_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/nats-io/nats.go"
)

// audit runs the permission audit (multitenant.Auditor) against tenant's roles of the running
// deployment: it fails on a destructive outcome that multitenant.Accept does not list, on a role
// or publish right it did not try, and when deploy/SECURITY.md's audit section is not what the run
// generates (-update writes it). -v prints every finding.
func audit(t *testing.T, d *deployment, tenant string) {
	op := d.conn(t, d.Identity(tenant, multitenant.Operator), "audit-operator")
	a := &multitenant.Auditor{
		Dial: func(r multitenant.Role) (*nats.Conn, error) {
			return d.dial(d.Identity(tenant, r), "audit-"+string(r))
		},
		Domains: map[multitenant.Role]string{multitenant.Viewer: d.Identity(tenant, multitenant.Viewer).Domain,
			multitenant.Projector: d.Identity(tenant, multitenant.Projector).Domain},
		Op: op, Partitions: d.Partitions, Wait: 2 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	fs, err := a.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d attempts in %v; the findings:\n%s", len(fs), time.Since(start).Round(time.Millisecond), multitenant.AuditTable(fs))
	for _, f := range multitenant.Unaccepted(fs) {
		t.Errorf("not accepted: %s %s: %s: %s (%s)", f.Role, f.Right, f.Attempt, f.Outcome, f.Reason)
	}
	// Every role, and every publish right of each, was tried.
	tried := map[string]bool{}
	for _, f := range fs {
		tried[string(f.Role)+" "+f.Right] = true
	}
	for _, r := range multitenant.Roles {
		p, _ := multitenant.RolePermissions(r, d.Partitions)
		for _, e := range p.Publish {
			if !tried[string(r)+" "+e.Subject] && !untried.MatchString(e.Subject) {
				t.Errorf("the audit did not try %s's right %s", r, e.Subject)
			}
		}
	}
	multitenant.CheckSection(t, "audit", multitenant.AuditSummary(fs))
}

// untried are the rights whose requests take no target at all and whose kind's reply-subject
// injection the audit tried with another right of the role (STREAM.INFO of the other streams,
// CONSUMER.INFO, CONSUMER.UNPIN, INFO).
var untried = regexp.MustCompile(`^\$JS\.API\.(STREAM\.INFO\.|CONSUMER\.INFO\.|CONSUMER\.UNPIN\.|INFO$)`)

// rmPreflight: rm with the forker's and the agent's credentials is refused before it changes
// anything, naming the right denied; with the operator's it removes the session.
func rmPreflight(t *testing.T, d *deployment) {
	d.importLog(t, "A_AGENT_ARGS", smallLog("rm-pre", markerA))
	before := d.ok(t, "", "A_AGENT_ARGS", "events", "rm-pre")
	want := `rm rm-pre: rm needs the operator role: \$JS\.API\.STREAM\.PURGE\.AGENTLOG is denied \(.*\); nothing was changed\.`
	for _, args := range []string{"A_FORKER_ARGS", "A_AGENT_ARGS"} {
		start := time.Now()
		d.refused(t, want, "", args, "rm", "rm-pre", "--yes")
		t.Logf("rm with $%s: refused in %v", args, time.Since(start).Round(time.Millisecond))
		if after := d.ok(t, "", "A_AGENT_ARGS", "events", "rm-pre"); after != before {
			t.Fatalf("rm-pre changed by the refused rm ($%s):\nbefore %s\nafter %s", args, before, after)
		}
		if out := d.ok(t, "", "A_AGENT_ARGS", "status", "rm-pre"); strings.Contains(out, "removed") {
			t.Fatalf("status after the refused rm ($%s): %s", args, out)
		}
	}
	out := d.ok(t, "", "A_OPERATOR_ARGS", "rm", "rm-pre", "--yes")
	if !strings.Contains(out, `removed session "rm-pre"`) {
		t.Fatalf("operator's rm: %s", out)
	}
	if code, _, _ := d.cli(t, "", "A_AGENT_ARGS", "events", "rm-pre"); code == 0 {
		t.Fatalf("rm-pre still reads after the operator's rm (exit %d)", code)
	}
}
