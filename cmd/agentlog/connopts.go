package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// connSetting is one connection setting: its flag, its environment variables in the order they are
// consulted (AGENTLOG_NATS_*, then the nats CLI's NATS_*), and its help text.
type connSetting struct {
	flag, env, natsEnv, usage string
	dst                       *string
}

// connFlags are the connection settings every command that dials NATS shares (flag > AGENTLOG_NATS_X >
// NATS_X > default, each setting on its own; the credentials as a whole come from one of the three,
// see resolve).
type connFlags struct {
	creds, nkey, user, password, token string
	tlsCA, tlsCert, tlsKey             string
	jsDomain                           string // --js-domain: the JetStream domain of agentlog ("": the account's own)

	opts []nats.Option // built by resolve, added by globals.natsOptions

	contextFlag string            // --context NAME
	noContext   bool              // resolve reads no context (context save)
	contextVals map[string]string // the active context's settings, by flag name (resolve)
}

func (f *connFlags) settings(g *globals) []connSetting {
	return []connSetting{
		{flag: "nats", env: "AGENTLOG_NATS_URL", natsEnv: "NATS_URL", dst: &g.natsURL,
			usage: "NATS server `URL`s, comma separated; may carry user:password@ or token@ (default " + DefaultNATSURL + ")"},
		{flag: "creds", env: "AGENTLOG_NATS_CREDS", natsEnv: "NATS_CREDS", dst: &f.creds,
			usage: "user credentials `FILE` (a JWT and its nkey seed, as nsc writes them)"},
		{flag: "nkey", env: "AGENTLOG_NATS_NKEY", natsEnv: "NATS_NKEY", dst: &f.nkey,
			usage: "`FILE` holding a user nkey seed (SU...)"},
		{flag: "user", env: "AGENTLOG_NATS_USER", natsEnv: "NATS_USER", dst: &f.user,
			usage: "`USER` name (with --password)"},
		{flag: "password", env: "AGENTLOG_NATS_PASSWORD", natsEnv: "NATS_PASSWORD", dst: &f.password,
			usage: "`PASSWORD` of --user (prefer the environment variable: a flag shows in the process list)"},
		{flag: "token", env: "AGENTLOG_NATS_TOKEN", natsEnv: "NATS_TOKEN", dst: &f.token,
			usage: "authentication `TOKEN` (prefer the environment variable: a flag shows in the process list)"},
		{flag: "tls-ca", env: "AGENTLOG_NATS_TLS_CA", natsEnv: "NATS_CA", dst: &f.tlsCA,
			usage: "PEM `FILE` of the CA(s) that sign the server's certificate (turns TLS on; tls:// URLs without it use the system roots)"},
		{flag: "tls-cert", env: "AGENTLOG_NATS_TLS_CERT", natsEnv: "NATS_CERT", dst: &f.tlsCert,
			usage: "PEM `FILE` of the client certificate, for servers that verify clients (with --tls-key)"},
		{flag: "tls-key", env: "AGENTLOG_NATS_TLS_KEY", natsEnv: "NATS_KEY", dst: &f.tlsKey,
			usage: "PEM `FILE` of the client certificate's private key (with --tls-cert)"},
		{flag: "js-domain", env: "AGENTLOG_JS_DOMAIN", natsEnv: "NATS_JS_DOMAIN", dst: &f.jsDomain,
			usage: "JetStream `DOMAIN` of the agentlog to use, when it is not the connected server's own: the hub's domain from a leaf node (deploy/leaf-node)"},
	}
}

// connFlagNames are the persistent flags that only matter to commands that dial NATS; offline
// commands hide them in their help (hideConnFlags).
var connFlagNames = []string{"nats", "creds", "nkey", "user", "password", "token", "tls-ca", "tls-cert", "tls-key", "js-domain", "context", "timeout"}

// addConnFlags registers the connection flags on root's persistent flags. Their values are taken from
// the environment in resolve, not here, so that --help shows no secret as a default.
func (f *connFlags) addConnFlags(g *globals, fs *pflag.FlagSet) {
	for _, s := range f.settings(g) {
		fs.StringVar(s.dst, s.flag, "", s.usage+" (env "+s.env+", then "+s.natsEnv+")")
	}
}

// resolve fills the settings not given as flags from the environment, checks that the credentials
// are one consistent set, moves user info out of the URL(s), and builds the connection options. A
// conflict is a usage error; files are read when a connection is made, and a bad one fails it,
// naming the flag and the file.
//
// Precedence: the URL and each TLS setting come from its flag, else AGENTLOG_NATS_X, else NATS_X,
// else the active context (--context, AGENTLOG_CONTEXT or the selected one: contexts.go). The
// credentials (creds, nkey, user/password, token, user info in the URL) come as a whole from the
// first of these four levels that sets any of them, so a NATS_USER in the environment never mixes
// with a --creds on the command line; two kinds at one level are refused.
func (f *connFlags) resolve(g *globals, fs *pflag.FlagSet) error {
	settings := f.settings(g)
	f.contextVals = nil
	if !f.noContext {
		_, c, err := activeContext(f.contextFlag)
		if err != nil {
			return err
		}
		f.contextVals = c.Settings
	}
	isAuth := func(s connSetting) bool {
		switch s.flag {
		case "creds", "nkey", "user", "password", "token":
			return true
		}
		return false
	}
	// The credentials' level and the URL's: 0 flags, 1 AGENTLOG_NATS_*, 2 NATS_*, 3 the context,
	// 4 the default.
	authLevel, urlLevel := -1, 0
	for level := 0; level < 4 && authLevel < 0; level++ {
		for _, s := range settings {
			if isAuth(s) && f.lookup(s, fs, level) != "" {
				authLevel = level
			}
		}
	}
	for _, s := range settings {
		if fs.Changed(s.flag) {
			if *s.dst == "" {
				return &usageError{fmt.Errorf("--%s is empty", s.flag)}
			}
			continue
		}
		if isAuth(s) {
			if authLevel > 0 {
				*s.dst = f.lookup(s, fs, authLevel)
			}
			continue
		}
		for level := 1; level < 4 && *s.dst == ""; level++ {
			*s.dst = f.lookup(s, fs, level)
			if s.flag == "nats" && *s.dst != "" {
				urlLevel = level
			}
		}
	}
	if g.natsURL == "" {
		g.natsURL, urlLevel = DefaultNATSURL, 4
	}
	stripped, ui, err := splitUserInfo(g.natsURL)
	if err != nil {
		return &usageError{err}
	}
	g.natsURL = stripped
	// User info in the URL is credentials at the URL's level: credentials from a level before it
	// win over it, from a level after it give way to it, and from the same level conflict with it.
	switch {
	case ui == nil || (authLevel >= 0 && authLevel < urlLevel):
		ui = nil
	case authLevel == urlLevel:
		return &usageError{errors.New("the NATS URL carries user info and credentials are given too (--creds, --nkey, --user, --token or their environment variables): choose one")}
	default:
		f.creds, f.nkey, f.user, f.password, f.token = "", "", "", "", ""
	}
	if ui != nil {
		if pw, ok := ui.Password(); ok {
			f.user, f.password = ui.Username(), pw
		} else {
			f.token = ui.Username()
		}
	}
	var kinds []string // the kinds of credentials given (a password goes with its user)
	for _, s := range settings {
		if isAuth(s) && s.flag != "password" && *s.dst != "" {
			kinds = append(kinds, "--"+s.flag)
		}
	}
	if len(kinds) > 1 {
		return &usageError{fmt.Errorf("credentials: %s given together; use one", strings.Join(kinds, " and "))}
	}
	if f.password != "" && f.user == "" {
		return &usageError{errors.New("--password needs --user")}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return &usageError{errors.New("--tls-cert and --tls-key go together")}
	}
	if err := store.CheckDomain(f.jsDomain); err != nil {
		return &usageError{fmt.Errorf("--js-domain: %w", err)}
	}

	f.opts = nil
	switch {
	case f.creds != "":
		creds := f.creds
		f.opts = append(f.opts, func(o *nats.Options) error {
			if _, err := os.Stat(creds); err != nil {
				return &connConfigError{fmt.Errorf("--creds: %w", err)}
			}
			return nats.UserCredentials(creds)(o)
		})
	case f.nkey != "":
		seed := f.nkey
		f.opts = append(f.opts, func(o *nats.Options) error {
			opt, err := nats.NkeyOptionFromSeed(seed)
			if err != nil {
				return &connConfigError{fmt.Errorf("--nkey %s: %w", seed, err)}
			}
			return opt(o)
		})
	case f.user != "":
		f.opts = append(f.opts, nats.UserInfo(f.user, f.password))
	case f.token != "":
		f.opts = append(f.opts, nats.Token(f.token))
	}
	if f.tlsCA != "" || f.tlsCert != "" {
		ca, cert, key := f.tlsCA, f.tlsCert, f.tlsKey
		f.opts = append(f.opts, func(o *nats.Options) error {
			cfg, err := loadTLS(ca, cert, key)
			if err != nil {
				return &connConfigError{err}
			}
			o.Secure, o.TLSConfig = true, cfg
			return nil
		})
	}
	return nil
}

// lookup returns setting s at level 0 (its flag, when given), 1 (AGENTLOG_NATS_*), 2 (NATS_*) or
// 3 (the active context).
func (f *connFlags) lookup(s connSetting, fs *pflag.FlagSet, level int) string {
	switch level {
	case 0:
		if fs.Changed(s.flag) {
			return *s.dst
		}
		return ""
	case 1:
		return os.Getenv(s.env)
	case 2:
		return os.Getenv(s.natsEnv)
	default:
		return f.contextVals[s.flag]
	}
}

// splitUserInfo removes user info (user:password@ or token@) from each of the comma-separated URLs,
// returning it once. URLs that carry different user info are refused.
func splitUserInfo(urls string) (string, *url.Userinfo, error) {
	parts := strings.Split(urls, ",")
	var found *url.Userinfo
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "@") {
			parts[i] = p
			continue
		}
		u, err := url.Parse(p)
		if err != nil || u.User == nil {
			return "", nil, fmt.Errorf("NATS URL %q: cannot parse its user info", redactURL(p))
		}
		if found != nil && found.String() != u.User.String() {
			return "", nil, errors.New("the NATS URLs carry different user info")
		}
		found = u.User
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ","), found, nil
}

// redactURL hides what follows the scheme up to an @, for error messages.
func redactURL(s string) string {
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := strings.Index(s, "://")
	if start < 0 || start > at {
		start = -3
	}
	return s[:start+3] + "REDACTED" + s[at:]
}

// loadTLS builds the client TLS configuration: the roots from ca (the system's when ""), and the
// client certificate when cert is set. Errors name the flag and the file.
func loadTLS(ca, cert, key string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", ca)
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// connConfigError is a connection setting that cannot be used (a file that cannot be read or
// parsed), found when the connection is made; it names the flag and the file.
type connConfigError struct{ err error }

func (e *connConfigError) Error() string { return e.err.Error() }
func (e *connConfigError) Unwrap() error { return e.err }

// connectionFailedForGood reports whether a connection error will not go away by retrying: bad
// credentials, a certificate that does not verify, a setting that cannot be used. The services
// stop on such an error instead of waiting for NATS.
func connectionFailedForGood(err error) bool {
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	var cve *tls.CertificateVerificationError
	var ce *connConfigError
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrNkeysNotSupported) || errors.Is(err, nats.ErrSecureConnRequired) ||
		errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie) || errors.As(err, &cve) || errors.As(err, &ce)
}

// serviceAnnotation marks a long-running service command (projector, forker): a refused request is
// logged and the service goes on, where another command stops at once (failFastOnRefusal).
const serviceAnnotation = "agentlog.service"

// markService marks c a service.
func markService(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[serviceAnnotation] = "true"
	return c
}

// failFastOnRefusal makes a permission violation reported by the server stop command c at once,
// with that violation as its error (see refusal): a request the server refuses to deliver is never
// answered, and would otherwise wait for --timeout and end as a bare "deadline exceeded".
func (g *globals) failFastOnRefusal(c *cobra.Command) {
	if c.Annotations[serviceAnnotation] == "true" {
		return
	}
	ctx, cancel := context.WithCancelCause(c.Context())
	c.SetContext(ctx)
	g.mu.Lock()
	g.refuse = cancel
	g.mu.Unlock()
}

// asyncError is the connections' error handler: a permission violation stops the command (see
// failFastOnRefusal); other errors, and every error of a service, are written to stderr.
func (g *globals) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if errors.Is(err, nats.ErrPermissionViolation) && g.refuse != nil {
		if g.refused == nil {
			why := "the credentials' permissions do not allow it; the roles: deploy/SECURITY.md"
			if g.conn.jsDomain == "" && strings.Contains(err.Error(), `"$JS.API.STREAM.INFO.`) {
				// Every role may read the streams' info (store.Open), except in an account of its
				// own (the multi-tenant viewer and projector), which imports the JetStream API under
				// a domain prefix only.
				why += "; a role with an account of its own reaches JetStream through a domain: pass --js-domain (the multi-tenant viewer's is <tenant>view, the projector's <tenant>proj; the contexts up.sh writes set it)"
			}
			g.refused = fmt.Errorf("NATS refused a request of this command: %w (%s)", err, why)
			g.refuse(g.refused)
		}
		return
	}
	if sub != nil {
		fmt.Fprintf(g.stderr, "agentlog: NATS: subscription %s: %v\n", sub.Subject, err)
	} else {
		fmt.Fprintf(g.stderr, "agentlog: NATS: %v\n", err)
	}
}

// refusal is the permission violation that stopped the command, or nil.
func (g *globals) refusal() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused
}

// offline marks a command that never dials NATS: its help leaves out the connection flags, and the
// connection settings are not resolved for it.
const offlineAnnotation = "agentlog.offline"

// markOffline marks c and its subcommands offline (see hideConnFlags).
func markOffline(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[offlineAnnotation] = "true"
	for _, sub := range c.Commands() {
		markOffline(sub)
	}
	return c
}

func isOffline(c *cobra.Command) bool { return c.Annotations[offlineAnnotation] == "true" }

// hideConnFlags makes the help of offline commands leave out the connection flags: while an offline
// command's help or usage is printed, those inherited flags are hidden (they belong to root, shared
// by every command, so they are shown again after).
func hideConnFlags(root *cobra.Command) {
	defHelp, defUsage := root.HelpFunc(), root.UsageFunc()
	hidden := func(c *cobra.Command, f func()) {
		if !isOffline(c) {
			f()
			return
		}
		var was []bool
		for _, name := range connFlagNames {
			fl := root.PersistentFlags().Lookup(name)
			was = append(was, fl.Hidden)
			fl.Hidden = true
		}
		defer func() {
			for i, name := range connFlagNames {
				root.PersistentFlags().Lookup(name).Hidden = was[i]
			}
		}()
		f()
	}
	root.SetHelpFunc(func(c *cobra.Command, args []string) { hidden(c, func() { defHelp(c, args) }) })
	root.SetUsageFunc(func(c *cobra.Command) error {
		var err error
		hidden(c, func() { err = defUsage(c) })
		return err
	})
}
