package multitenant

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"
)

// Options configure Generate. Zero values: Host 127.0.0.1, Port and HTTPPort free loopback ports
// picked now, Partitions wire.DefaultPartitions, MaxFileStore 1 GiB and MaxMemStore 64 MiB
// per tenant.
type Options struct {
	Dir        string   // required: everything is written under it
	Tenants    []string // required: account names, [A-Za-z0-9]+, e.g. A and B
	Host       string
	Port       int // client port (TLS)
	HTTPPort   int // monitoring port (plain HTTP, loopback)
	Partitions int // of every tenant's AGENTLOG stream: the projector consumers agents may not touch

	MaxFileStore, MaxMemStore int64 // bytes of JetStream storage per tenant account
}

// Identity is one user of a tenant (or of the system account): its name, its credential files and
// its client certificate.
type Identity struct {
	Tenant   string `json:"tenant"`
	Role     Role   `json:"role"`
	Name     string `json:"name"`               // user name (password users) or a label (nkey users)
	NkeyFile string `json:"nkeyFile,omitempty"` // the user's nkey seed (mode 0600)
	Public   string `json:"public,omitempty"`   // the nkey's public key, as the server knows the user
	Password string `json:"-"`                  // password users only; kept in PasswordFile
	PassFile string `json:"passwordFile,omitempty"`
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// Account is the NATS account of the user: the tenant's, or RoleAccount for a role with an
	// account of its own (Permissions.OwnAccount), whose clients use the JetStream domain Domain.
	Account string `json:"account"`
	Domain  string `json:"jsDomain,omitempty"`
}

// Deployment is what Generate wrote.
type Deployment struct {
	Dir        string      `json:"dir"`
	ConfFile   string      `json:"confFile"`
	URL        string      `json:"url"`     // tls://host:port
	HTTPURL    string      `json:"httpUrl"` // http://host:port of the monitoring endpoints
	CAFile     string      `json:"caFile"`
	Tenants    []string    `json:"tenants"`
	Partitions int         `json:"partitions"`
	Identities []*Identity `json:"identities"`
}

// Identity returns the identity of role in tenant (nil when there is none).
func (d *Deployment) Identity(tenant string, role Role) *Identity {
	for _, id := range d.Identities {
		if id.Tenant == tenant && id.Role == role {
			return id
		}
	}
	return nil
}

// passwordCost is the bcrypt cost of the passwords in the server config (see conf).
const passwordCost = 6

// passwordRoles authenticate with a user name and password; the others with an nkey.
var passwordRoles = map[Role]bool{Viewer: true}

var tenantName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,31}$`)

// Generate writes a multi-tenant deployment under o.Dir: a test CA and the server's and every
// identity's certificates (tls/), each tenant's identities (tenants/<t>/: nkey seeds, a password
// file, certificates, and <role>.env with the AGENTLOG_NATS_* variables), the system account's
// user, and nats.conf: one account per tenant with JetStream limits and the role permissions of
// RolePermissions, and per tenant a viewer account and a projector account (RoleAccount) that
// import those roles' entries from it (and export what the projector serves), TLS with client
// verification. Secrets are written mode 0600.
func Generate(o Options) (*Deployment, error) {
	if o.Dir == "" || len(o.Tenants) == 0 {
		return nil, errors.New("multitenant: Dir and Tenants are required")
	}
	seen := map[string]bool{"SYS": true}
	for _, t := range o.Tenants {
		if !tenantName.MatchString(t) || seen[strings.ToUpper(t)] {
			return nil, fmt.Errorf("multitenant: tenant %q: want a unique name of letters and digits, starting with a letter, not SYS", t)
		}
		seen[strings.ToUpper(t)] = true
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	var err error
	for _, p := range []*int{&o.Port, &o.HTTPPort} {
		if *p == 0 {
			if *p, err = FreePort(o.Host); err != nil {
				return nil, err
			}
		}
	}
	if o.Partitions == 0 {
		o.Partitions = 16
	}
	if o.MaxFileStore == 0 {
		o.MaxFileStore = 1 << 30
	}
	if o.MaxMemStore == 0 {
		o.MaxMemStore = 64 << 20
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	tlsDir := filepath.Join(dir, "tls")
	for _, d := range []string{tlsDir, filepath.Join(dir, "data")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	ca, err := NewCA(tlsDir, "agentlog test CA")
	if err != nil {
		return nil, err
	}
	srvCert, srvKey, err := ca.Issue(tlsDir, "server", true, o.Host)
	if err != nil {
		return nil, err
	}
	d := &Deployment{
		Dir: dir, ConfFile: filepath.Join(dir, "nats.conf"), CAFile: ca.CertFile,
		URL:        "tls://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port)),
		HTTPURL:    "http://" + net.JoinHostPort(o.Host, strconv.Itoa(o.HTTPPort)),
		Tenants:    o.Tenants,
		Partitions: o.Partitions,
	}
	sys, err := newIdentity(ca, dir, "SYS", "system", false)
	if err != nil {
		return nil, err
	}
	d.Identities = append(d.Identities, sys)
	for _, t := range o.Tenants {
		for _, r := range Roles {
			id, err := newIdentity(ca, dir, t, r, passwordRoles[r])
			if err != nil {
				return nil, err
			}
			d.Identities = append(d.Identities, id)
			if err := writeFile(filepath.Join(dir, "tenants", strings.ToLower(t), string(r)+".env"), []byte(id.envFile(d)), 0o600); err != nil {
				return nil, err
			}
		}
	}
	conf, err := d.conf(o, srvCert, srvKey)
	if err != nil {
		return nil, err
	}
	if err := writeFile(d.ConfFile, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return d, nil
}

func newIdentity(ca *CA, dir, tenant string, role Role, password bool) (*Identity, error) {
	name := strings.ToLower(tenant) + "-" + string(role)
	idDir := filepath.Join(dir, "tenants", strings.ToLower(tenant))
	if tenant == "SYS" {
		idDir = filepath.Join(dir, "tenants", "sys")
	}
	if err := os.MkdirAll(idDir, 0o700); err != nil {
		return nil, err
	}
	id := &Identity{Tenant: tenant, Role: role, Name: name, Account: tenant}
	if p, err := RolePermissions(role, 1); err == nil && p.OwnAccount {
		id.Account, id.Domain = RoleAccount(tenant, role), RoleDomain(tenant, role)
	}
	var err error
	if id.CertFile, id.KeyFile, err = ca.Issue(idDir, string(role), false, ""); err != nil {
		return nil, err
	}
	if password {
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		id.Password = hex.EncodeToString(b)
		id.PassFile = filepath.Join(idDir, string(role)+".password")
		return id, writeFile(id.PassFile, []byte(id.Password+"\n"), 0o600)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	if id.Public, err = kp.PublicKey(); err != nil {
		return nil, err
	}
	id.NkeyFile = filepath.Join(idDir, string(role)+".nk")
	return id, writeFile(id.NkeyFile, append(seed, '\n'), 0o600)
}

// AgentlogArgs are the agentlog global flags that authenticate as id (with the server's CA).
func (id *Identity) AgentlogArgs(d *Deployment) []string {
	args := []string{"--tls-ca", d.CAFile, "--tls-cert", id.CertFile, "--tls-key", id.KeyFile}
	if id.Domain != "" {
		args = append(args, "--js-domain", id.Domain)
	}
	if id.NkeyFile != "" {
		return append(args, "--nkey", id.NkeyFile)
	}
	return append(args, "--user", id.Name, "--password", id.Password)
}

// NatsArgs are the nats CLI flags for id.
func (id *Identity) NatsArgs(d *Deployment) []string {
	args := []string{"--server", d.URL, "--tlsca", d.CAFile, "--tlscert", id.CertFile, "--tlskey", id.KeyFile}
	if id.Domain != "" {
		args = append(args, "--js-domain", id.Domain)
	}
	if id.NkeyFile != "" {
		return append(args, "--nkey", id.NkeyFile)
	}
	return append(args, "--user", id.Name, "--password", id.Password)
}

// Env are the AGENTLOG_NATS_* variables that connect agentlog as id.
func (id *Identity) Env(d *Deployment) []string {
	env := []string{"AGENTLOG_NATS_URL=" + d.URL, "AGENTLOG_NATS_TLS_CA=" + d.CAFile,
		"AGENTLOG_NATS_TLS_CERT=" + id.CertFile, "AGENTLOG_NATS_TLS_KEY=" + id.KeyFile}
	if id.Domain != "" {
		env = append(env, "AGENTLOG_JS_DOMAIN="+id.Domain)
	}
	if id.NkeyFile != "" {
		return append(env, "AGENTLOG_NATS_NKEY="+id.NkeyFile)
	}
	return append(env, "AGENTLOG_NATS_USER="+id.Name, "AGENTLOG_NATS_PASSWORD="+id.Password)
}

func (id *Identity) envFile(d *Deployment) string {
	var b strings.Builder
	for _, kv := range id.Env(d) {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, ShellQuote(v))
	}
	return b.String()
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (d *Deployment) conf(o Options, srvCert, srvKey string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# agentlog multi-tenant deployment, written by deploy/multi-tenant/gen. One account per tenant, and one per tenant viewer.\n")
	fmt.Fprintf(&b, "server_name: agentlog-mt\nlisten: %s\nhttp: %s\n", strconv.Quote(net.JoinHostPort(o.Host, strconv.Itoa(o.Port))),
		strconv.Quote(net.JoinHostPort(o.Host, strconv.Itoa(o.HTTPPort))))
	fmt.Fprintf(&b, "max_payload: 1MB\n")
	fmt.Fprintf(&b, "jetstream { store_dir: %s, max_file_store: %d, max_memory_store: %d }\n",
		strconv.Quote(filepath.Join(d.Dir, "data")), o.MaxFileStore*int64(len(o.Tenants)+1), o.MaxMemStore*int64(len(o.Tenants)+1))
	fmt.Fprintf(&b, "tls {\n  cert_file: %s\n  key_file: %s\n  ca_file: %s\n  verify: true\n  timeout: 2\n}\n",
		strconv.Quote(srvCert), strconv.Quote(srvKey), strconv.Quote(d.CAFile))
	b.WriteString("\naccounts {\n")
	sys := d.Identity("SYS", "system")
	fmt.Fprintf(&b, "  SYS {\n    users: [ { nkey: %s } ]\n  }\n", strconv.Quote(sys.Public))
	for _, t := range d.Tenants {
		fmt.Fprintf(&b, "  %s {\n    jetstream: { max_file: %d, max_mem: %d, max_streams: 16, max_consumers: 1024 }\n",
			t, o.MaxFileStore, o.MaxMemStore)
		var own []Role // roles with an account of their own: the tenant exports to each
		var users strings.Builder
		for _, r := range Roles {
			perms, err := RolePermissions(r, o.Partitions)
			if err != nil {
				return "", err
			}
			if perms.OwnAccount {
				own = append(own, r)
				continue
			}
			if err := d.user(&users, t, r, perms, "      "); err != nil {
				return "", err
			}
		}
		b.WriteString("    users: [\n" + users.String() + "    ]\n")
		// The request subjects that a role in an account of its own serves: the account that
		// answers each, and every account of the tenant imports it from there.
		servedBy := map[string]string{}
		for _, r := range own {
			perms, _ := RolePermissions(r, o.Partitions)
			for _, subj := range perms.Serves {
				servedBy[subj] = d.Identity(t, r).Account
			}
		}
		var exports, others, tenantImports strings.Builder
		for _, subj := range slices.Sorted(maps.Keys(servedBy)) {
			fmt.Fprintf(&tenantImports, "      { service: { account: %s, subject: %s } }\n", strconv.Quote(servedBy[subj]), strconv.Quote(subj))
		}
		for _, r := range own {
			perms, _ := RolePermissions(r, o.Partitions)
			id := d.Identity(t, r)
			acc := strconv.Quote(id.Account)
			var imports, ownExports strings.Builder
			seen := map[string]bool{}
			for _, subj := range perms.Serves {
				seen[subj] = true
				to := []string{strconv.Quote(t)}
				for _, r2 := range own {
					if r2 != r {
						to = append(to, strconv.Quote(d.Identity(t, r2).Account))
					}
				}
				fmt.Fprintf(&ownExports, "      { service: %s, accounts: [%s] }\n", strconv.Quote(subj), strings.Join(to, ", "))
			}
			for _, x := range perms.Publish {
				if seen[x.Subject] {
					continue
				}
				seen[x.Subject] = true
				if from, ok := servedBy[x.Subject]; ok { // served by another role's own account
					fmt.Fprintf(&imports, "      { service: { account: %s, subject: %s } }\n", strconv.Quote(from), strconv.Quote(x.Subject))
					continue
				}
				resp := ""
				if StreamResponses(x.Subject) {
					resp = ", response_type: stream"
				}
				fmt.Fprintf(&exports, "      { service: %s, accounts: [%s]%s }\n", strconv.Quote(x.Subject), acc, resp)
				fmt.Fprintf(&imports, "      { service: { account: %s, subject: %s }, to: %s }\n", strconv.Quote(t), strconv.Quote(x.Subject),
					strconv.Quote(perms.InAccount(x.Subject, id.Domain)))
			}
			for _, x := range perms.Subscribe {
				// Its inbox, and the micro discovery requests ($SRV.>: answered in its own
				// account only; a stream import would bring requests whose replies cannot go back).
				if x.Subject == inbox.Subject || x.Subject == srvDiscovery.Subject || seen[x.Subject] {
					continue
				}
				seen[x.Subject] = true
				fmt.Fprintf(&exports, "      { stream: %s, accounts: [%s] }\n", strconv.Quote(x.Subject), acc)
				fmt.Fprintf(&imports, "      { stream: { account: %s, subject: %s } }\n", strconv.Quote(t), strconv.Quote(x.Subject))
			}
			// Its permissions in its account: the same entries, the $JS.API ones under its prefix.
			inAcc := perms
			inAcc.Publish = mapEntries(perms.Publish, func(s string) string { return perms.InAccount(s, id.Domain) })
			inAcc.DenyPublish = mapEntries(perms.DenyPublish, func(s string) string { return perms.InAccount(s, id.Domain) })
			var u strings.Builder
			if err := d.user(&u, t, r, inAcc, "      "); err != nil {
				return "", err
			}
			fmt.Fprintf(&others, "  # %s: the %s of tenant %s, in an account of its own (no JetStream): it reaches %s only through these imports\n", id.Account, r, t, t)
			fmt.Fprintf(&others, "  %s {\n    users: [\n%s    ]\n    imports: [\n%s    ]\n", id.Account, u.String(), imports.String())
			if ownExports.Len() > 0 {
				fmt.Fprintf(&others, "    exports: [\n%s    ]\n", ownExports.String())
			}
			others.WriteString("  }\n")
		}
		if exports.Len() > 0 {
			b.WriteString("    exports: [\n" + exports.String() + "    ]\n")
		}
		if tenantImports.Len() > 0 {
			b.WriteString("    imports: [\n" + tenantImports.String() + "    ]\n")
		}
		b.WriteString("  }\n" + others.String())
	}
	b.WriteString("}\nsystem_account: SYS\n")
	return b.String(), nil
}

// user writes the user of role in tenant, with perms.
func (d *Deployment) user(b *strings.Builder, t string, r Role, perms Permissions, indent string) error {
	id := d.Identity(t, r)
	fmt.Fprintf(b, "%s# %s: %s\n", indent, id.Name, r)
	if id.Password != "" {
		// The password is 144 random bits: no cost factor is what protects it. A low cost
		// keeps the check quick; the server runs it on the client's read loop, and a
		// cost-11 check took seconds on a loaded 2-core host, past the server's first PING.
		hash, err := bcrypt.GenerateFromPassword([]byte(id.Password), passwordCost)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s{ user: %s, password: %s,\n%s  permissions: %s }\n", indent, strconv.Quote(id.Name), strconv.Quote(string(hash)), indent, perms.conf(indent+"  "))
		return nil
	}
	fmt.Fprintf(b, "%s{ nkey: %s,\n%s  permissions: %s }\n", indent, strconv.Quote(id.Public), indent, perms.conf(indent+"  "))
	return nil
}

func mapEntries(es []Entry, f func(string) string) []Entry {
	out := make([]Entry, len(es))
	for i, x := range es {
		out[i] = Entry{f(x.Subject), x.Why}
	}
	return out
}

// CA is a certificate authority for tests and local deployments.
type CA struct {
	CertFile, KeyFile string
	cert              *x509.Certificate
	key               *ecdsa.PrivateKey
}

// NewCA creates a CA (ECDSA P-256, valid one year) and writes ca.pem and ca-key.pem into dir.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"agentlog"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{CertFile: filepath.Join(dir, "ca.pem"), KeyFile: filepath.Join(dir, "ca-key.pem"), cert: cert, key: key}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return ca, writePEM(ca.KeyFile, "PRIVATE KEY", kb, 0o600)
}

// Issue writes <name>.pem and <name>-key.pem into dir: a server certificate for host (and
// localhost, 127.0.0.1, ::1) when server, else a client certificate with common name name.
func (ca *CA) Issue(dir, name string, server bool, host string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"agentlog"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(90 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		if ip := net.ParseIP(host); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if host != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return "", "", err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "PRIVATE KEY", kb, 0o600)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// FreePort returns a TCP port free on host now.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("multitenant: no free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
