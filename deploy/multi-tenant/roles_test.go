package multitenant

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// roleTable renders role's permissions as SECURITY.md lists them: one row per entry, the
// projector's partition consumers written once with <p>.
func roleTable(t *testing.T, role Role) string {
	p, err := RolePermissions(role, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| right | subject | why |\n|---|---|---|\n")
	rows := func(kind string, es []Entry) {
		for _, e := range es {
			subj := strings.ReplaceAll(e.Subject, "agentlog-projector-0", "agentlog-projector-<p>")
			fmt.Fprintf(&b, "| %s | `%s` | %s |\n", kind, subj, e.Why)
		}
	}
	rows("publish", p.Publish)
	rows("deny publish", p.DenyPublish)
	rows("subscribe", p.Subscribe)
	rows("deny subscribe", p.DenySubscribe)
	if p.AllowResponses {
		b.WriteString("| allow_responses | (reply subjects of requests it received) | answers requests: one reply each, within 2 minutes |\n")
	}
	return b.String()
}

// TestSecurityDocListsEveryEntry keeps deploy/SECURITY.md's role tables equal to RolePermissions:
// on a mismatch it prints the table to paste.
func TestSecurityDocListsEveryEntry(t *testing.T) {
	doc, err := os.ReadFile("../SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Roles {
		if table := roleTable(t, r); !strings.Contains(string(doc), table) {
			t.Errorf("deploy/SECURITY.md does not have the %s table as RolePermissions has it; it should read:\n\n%s", r, table)
		}
	}
}

// TestGenerateRefuses: bad tenant names and a missing directory are refused before anything is written.
func TestGenerateRefuses(t *testing.T) {
	for _, tenants := range [][]string{{"A", "a"}, {"SYS"}, {"a-b"}, {""}, {"1x"}} {
		if _, err := Generate(Options{Dir: t.TempDir(), Tenants: tenants}); err == nil {
			t.Errorf("Generate accepted tenants %q", tenants)
		}
	}
	if _, err := Generate(Options{Tenants: []string{"A"}}); err == nil {
		t.Error("Generate accepted no Dir")
	}
}
