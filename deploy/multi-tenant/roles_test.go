package multitenant

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// UpdateDoc makes the doc tests write deploy/SECURITY.md from the data instead of failing
// (go test ./deploy/multi-tenant -update; the audit's section needs TestMultiTenant/audit).
var UpdateDoc = flag.Bool("update", false, "write deploy/SECURITY.md's generated sections")

// SecurityDocPath is deploy/SECURITY.md, from this package's directory.
const SecurityDocPath = "../SECURITY.md"

// CheckSection compares section name of deploy/SECURITY.md with content; with -update it writes
// content there instead.
func CheckSection(t *testing.T, name, content string) {
	t.Helper()
	b, err := os.ReadFile(SecurityDocPath)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ReplaceSection(string(b), name, content)
	if err != nil {
		t.Fatal(err)
	}
	if doc == string(b) {
		return
	}
	if *UpdateDoc {
		if err := os.WriteFile(SecurityDocPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("deploy/SECURITY.md: section %s written", name)
		return
	}
	note := "" // the audit's outcomes depend on the sessions the other subtests wrote
	if name == "audit" {
		note = ": the whole test, not one subtest"
	}
	t.Errorf("deploy/SECURITY.md's section %s is not what the data generates (go test ./deploy/multi-tenant -run %s -update writes it%s); it should read:\n\n%s", name, strings.Split(t.Name(), "/")[0], note, content)
}

// TestSecurityDoc keeps deploy/SECURITY.md's role tables equal to RolePermissions and its list of
// what remains possible within a tenant equal to the audit's accepted list (Accept).
func TestSecurityDoc(t *testing.T) {
	for _, r := range Roles {
		table, err := RoleTable(r)
		if err != nil {
			t.Fatal(err)
		}
		CheckSection(t, "role-"+string(r), table)
	}
	CheckSection(t, "remains", RemainsList())
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

// TestAuditKnowsEveryRight: the audit has an attack for every kind of request a role is granted
// (a new kind of right fails here, without the deployment, until attempts handles it).
func TestAuditKnowsEveryRight(t *testing.T) {
	for _, r := range Roles {
		ats, err := attempts(r, 16)
		if err != nil {
			t.Fatal(err)
		}
		if len(ats) == 0 {
			t.Errorf("no attempts for role %s", r)
		}
	}
}
