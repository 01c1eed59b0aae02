package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// authServer starts an embedded nats-server with JetStream whose options set adjusts (users, a
// token, nkeys, TLS, an operator), and returns its client URL (host:port, no scheme).
func authServer(t *testing.T, set func(*server.Options)) string {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	set(o)
	srv, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.Addr().String()
}

// cli runs the CLI in process with args and no --nats of its own.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// clearConnEnv unsets every connection variable for the test (the machine's own would leak in).
func clearConnEnv(t *testing.T) {
	for _, s := range (&connFlags{}).settings(&globals{}) {
		t.Setenv(s.env, "")
		t.Setenv(s.natsEnv, "")
	}
}

func wantExit(t *testing.T, what string, want int, code int, out, errOut string, contains ...string) {
	t.Helper()
	if code != want {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, code, want, out, errOut)
	}
	for _, c := range contains {
		if !strings.Contains(out+errOut, c) {
			t.Fatalf("%s: output does not name %q\nstdout: %s\nstderr: %s", what, c, out, errOut)
		}
	}
}

func TestConnUserPasswordAndPrecedence(t *testing.T) {
	clearConnEnv(t)
	addr := authServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "alice", Password: "pw-alice-123"}}
	})
	url := "nats://" + addr
	code, out, errOut := cli(t, "--nats", url, "provision")
	wantExit(t, "no credentials", 1, code, out, errOut, "uthorization")
	code, out, errOut = cli(t, "--nats", url, "--user", "alice", "--password", "pw-alice-123", "provision")
	wantExit(t, "--user/--password", 0, code, out, errOut)
	// User info in the URL: used, and never printed.
	code, out, errOut = cli(t, "--nats", "nats://alice:pw-alice-123@"+addr, "provision")
	wantExit(t, "URL user info", 0, code, out, errOut)
	if strings.Contains(out+errOut, "pw-alice-123") {
		t.Fatalf("the password was printed: %s %s", out, errOut)
	}
	// A service does not wait for NATS on bad credentials: retrying cannot cure them.
	code, out, errOut = cli(t, "--nats", url, "--user", "alice", "--password", "wrong", "forker")
	wantExit(t, "forker with a wrong password", 1, code, out, errOut, "uthorization")
	if strings.Contains(errOut, "gave up waiting") || strings.Contains(errOut, "waiting for NATS") {
		t.Fatalf("the forker waited for NATS on bad credentials: %s", errOut)
	}
	code, out, errOut = cli(t, "--nats", "nats://alice:wrong@"+addr, "provision")
	wantExit(t, "URL with a wrong password", 1, code, out, errOut, "uthorization")
	if strings.Contains(out+errOut, "wrong") {
		t.Fatalf("the password was printed: %s %s", out, errOut)
	}

	// NATS_* is used when nothing else is set; AGENTLOG_NATS_* wins over it; a flag over both.
	t.Setenv("NATS_URL", url)
	t.Setenv("NATS_USER", "alice")
	t.Setenv("NATS_PASSWORD", "pw-alice-123")
	code, out, errOut = cli(t, "provision")
	wantExit(t, "NATS_URL, NATS_USER, NATS_PASSWORD", 0, code, out, errOut)
	t.Setenv("AGENTLOG_NATS_USER", "alice")
	t.Setenv("AGENTLOG_NATS_PASSWORD", "wrong")
	code, out, errOut = cli(t, "provision")
	wantExit(t, "AGENTLOG_NATS_PASSWORD wins over NATS_PASSWORD", 1, code, out, errOut, "uthorization")
	code, out, errOut = cli(t, "--user", "alice", "--password", "pw-alice-123", "provision")
	wantExit(t, "flags win over the environment", 0, code, out, errOut)
	// A token flag replaces the environment's credentials as a whole (no mixing with its user).
	code, out, errOut = cli(t, "--token", "x", "provision")
	wantExit(t, "--token with AGENTLOG_NATS_USER in the environment", 1, code, out, errOut, "uthorization")
	// User info in a --nats flag wins over credentials in the environment; a --user flag over user
	// info in an environment URL.
	code, out, errOut = cli(t, "--nats", "nats://alice:pw-alice-123@"+addr, "provision")
	wantExit(t, "URL user info over AGENTLOG_NATS_USER", 0, code, out, errOut)
	t.Setenv("AGENTLOG_NATS_USER", "")
	t.Setenv("AGENTLOG_NATS_PASSWORD", "")
	t.Setenv("NATS_USER", "")
	t.Setenv("NATS_PASSWORD", "")
	t.Setenv("AGENTLOG_NATS_URL", "nats://alice:wrong@"+addr)
	code, out, errOut = cli(t, "--user", "alice", "--password", "pw-alice-123", "provision")
	wantExit(t, "--user over user info in AGENTLOG_NATS_URL", 0, code, out, errOut)
	code, out, errOut = cli(t, "provision")
	wantExit(t, "user info in AGENTLOG_NATS_URL", 1, code, out, errOut, "uthorization")
	t.Setenv("AGENTLOG_NATS_USER", "alice")
	code, out, errOut = cli(t, "provision")
	wantExit(t, "user info and AGENTLOG_NATS_USER, both from the environment", 2, code, out, errOut, "choose one")
}

func TestConnTokenNkeyAndUsageErrors(t *testing.T) {
	clearConnEnv(t)
	tokAddr := authServer(t, func(o *server.Options) { o.Authorization = "tok-123456" })
	code, out, errOut := cli(t, "--nats", "nats://"+tokAddr, "--token", "tok-123456", "provision")
	wantExit(t, "--token", 0, code, out, errOut)
	code, out, errOut = cli(t, "--nats", "nats://tok-123456@"+tokAddr, "provision")
	wantExit(t, "token in the URL", 0, code, out, errOut)
	t.Setenv("AGENTLOG_NATS_TOKEN", "tok-123456")
	code, out, errOut = cli(t, "--nats", "nats://"+tokAddr, "provision")
	wantExit(t, "AGENTLOG_NATS_TOKEN", 0, code, out, errOut)
	t.Setenv("AGENTLOG_NATS_TOKEN", "")

	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	os.WriteFile(seedFile, seed, 0o600)
	nkAddr := authServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	code, out, errOut = cli(t, "--nats", "nats://"+nkAddr, "--nkey", seedFile, "provision")
	wantExit(t, "--nkey", 0, code, out, errOut)
	code, out, errOut = cli(t, "--nats", "nats://"+nkAddr, "--nkey", filepath.Join(t.TempDir(), "missing.nk"), "provision")
	wantExit(t, "--nkey of a missing file", 1, code, out, errOut, "--nkey", "missing.nk")

	for _, c := range []struct {
		name string
		args []string
		says string
	}{
		{"two kinds of credentials", []string{"--token", "a", "--nkey", seedFile}, "--nkey and --token"},
		{"--password without --user", []string{"--password", "p"}, "--password needs --user"},
		{"URL user info and --user", []string{"--nats", "nats://u:p@" + nkAddr, "--user", "v"}, "user info"},
		{"--tls-cert without --tls-key", []string{"--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{"an empty --nkey", []string{"--nkey", ""}, "--nkey is empty"},
	} {
		code, out, errOut := cli(t, append(c.args, "sessions")...)
		wantExit(t, c.name, 2, code, out, errOut, c.says)
	}
}

func TestConnTLS(t *testing.T) {
	clearConnEnv(t)
	dir := t.TempDir()
	ca, err := multitenant.NewCA(dir, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	scert, skey, _ := ca.Issue(dir, "server", true, "127.0.0.1")
	ccert, ckey, _ := ca.Issue(dir, "client", false, "")
	other := t.TempDir()
	wrong, _ := multitenant.NewCA(other, "another CA")
	addr := authServer(t, func(o *server.Options) {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: scert, KeyFile: skey, CaFile: ca.CertFile, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tc, true, true, 2
	})
	url := "tls://" + addr
	code, out, errOut := cli(t, "--nats", url, "--tls-ca", ca.CertFile, "--tls-cert", ccert, "--tls-key", ckey, "provision")
	wantExit(t, "TLS with a client certificate", 0, code, out, errOut)
	// The same through the environment, and with nats:// (TLS is on with --tls-ca).
	t.Setenv("AGENTLOG_NATS_TLS_CA", ca.CertFile)
	t.Setenv("AGENTLOG_NATS_TLS_CERT", ccert)
	t.Setenv("AGENTLOG_NATS_TLS_KEY", ckey)
	code, out, errOut = cli(t, "--nats", "nats://"+addr, "provision")
	wantExit(t, "TLS from AGENTLOG_NATS_TLS_*", 0, code, out, errOut)
	clearConnEnv(t)
	code, out, errOut = cli(t, "--nats", url, "--tls-ca", wrong.CertFile, "--tls-cert", ccert, "--tls-key", ckey, "provision")
	wantExit(t, "a server certificate the CA did not sign", 1, code, out, errOut, "certificate signed by unknown authority")
	code, out, errOut = cli(t, "--nats", url, "--tls-ca", ca.CertFile, "provision")
	wantExit(t, "no client certificate", 1, code, out, errOut)
	code, out, errOut = cli(t, "--nats", url, "--tls-ca", filepath.Join(dir, "nope.pem"), "provision")
	wantExit(t, "a missing CA file", 1, code, out, errOut, "--tls-ca", "nope.pem")
}

// TestConnCreds runs a server in operator mode (JWT accounts, as nsc sets them up) and connects
// with a user's credentials file.
func TestConnCreds(t *testing.T) {
	clearConnEnv(t)
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	oclaims, _ := jwt.DecodeOperatorClaims(ojwt)
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{DiskStorage: -1, MemoryStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(t.TempDir(), "user.creds")
	os.WriteFile(credsFile, creds, 0o600)
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	addr := authServer(t, func(o *server.Options) {
		res := &server.MemAccResolver{}
		res.Store(apub, ajwt)
		res.Store(spub, sjwt)
		o.SystemAccount = spub
		o.TrustedOperators = []*jwt.OperatorClaims{oclaims}
		o.AccountResolver = res
	})
	code, out, errOut := cli(t, "--nats", "nats://"+addr, "--creds", credsFile, "provision")
	wantExit(t, "--creds", 0, code, out, errOut)
	t.Setenv("NATS_CREDS", credsFile)
	code, out, errOut = cli(t, "--nats", "nats://"+addr, "provision")
	wantExit(t, "NATS_CREDS", 0, code, out, errOut)
	t.Setenv("NATS_CREDS", "")
	code, out, errOut = cli(t, "--nats", "nats://"+addr, "--creds", filepath.Join(t.TempDir(), "none.creds"), "provision")
	wantExit(t, "a missing creds file", 1, code, out, errOut, "--creds", "none.creds")
}

// flagLine matches the line of flag f in a help text's flag list.
func flagLine(f string) *regexp.Regexp { return regexp.MustCompile(`(?m)^\s+--` + f + ` `) }

// TestOfflineHelpHidesConnectionFlags: commands that never dial NATS leave the connection flags
// out of their help; the others show them all.
func TestOfflineHelpHidesConnectionFlags(t *testing.T) {
	clearConnEnv(t)
	for _, args := range [][]string{{"inspect", "--help"}, {"version", "--help"}, {"demo", "--help"}, {"dev", "--help"},
		{"bench", "append", "--help"}, {"bench", "project", "--help"}, {"completion", "bash", "--help"}, {"help", "inspect"}} {
		code, out, errOut := cli(t, args...)
		wantExit(t, strings.Join(args, " "), 0, code, out, errOut)
		for _, f := range connFlagNames {
			if f == "js-domain" && args[0] == "dev" {
				continue // dev's own: the embedded server's JetStream domain
			}
			if flagLine(f).MatchString(out) {
				t.Errorf("agentlog %s shows --%s:\n%s", strings.Join(args, " "), f, out)
			}
		}
	}
	for _, args := range [][]string{{"events", "--help"}, {"sessions", "--help"}, {"projector", "--help"}, {"help", "fork"}} {
		code, out, errOut := cli(t, args...)
		wantExit(t, strings.Join(args, " "), 0, code, out, errOut)
		for _, f := range connFlagNames {
			if !flagLine(f).MatchString(out) {
				t.Errorf("agentlog %s does not show --%s:\n%s", strings.Join(args, " "), f, out)
			}
		}
	}
	// Hiding is only while an offline command's help is printed: the next help shows them again.
	root := newRootCmd(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
	for _, f := range connFlagNames {
		if root.PersistentFlags().Lookup(f).Hidden {
			t.Errorf("--%s is hidden on a fresh root", f)
		}
	}
}
