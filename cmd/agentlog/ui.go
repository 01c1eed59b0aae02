package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/agentlog/agentlog/internal/inspector"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// uiOptions are the web inspector's flags: --ui-token, --ui-token-file, --ui-tls-cert and
// --ui-tls-key on both commands (the global --token, --tls-cert and --tls-key are NATS's); on
// `agentlog ui` with --listen and --allow-fork, on `agentlog dev` with --ui and --ui-allow-fork.
type uiOptions struct {
	listen, token, tokenFile string
	tlsCert, tlsKey          string
	allowFork                bool
}

func (o *uiOptions) addFlags(c *cobra.Command, allowFork string) {
	const prefix = "ui-"
	c.Flags().StringVar(&o.token, prefix+"token", os.Getenv("AGENTLOG_UI_TOKEN"), "token every request must carry (Authorization: Bearer, or the cookie ?token= sets); required for a non-loopback address (env AGENTLOG_UI_TOKEN; a flag is visible to ps, prefer --"+prefix+"token-file)")
	c.Flags().StringVar(&o.tokenFile, prefix+"token-file", "", "read the token from this file (first line)")
	c.Flags().BoolVar(&o.allowFork, allowFork, false, "enable \"fork from here\" (without it the inspector is read-only)")
	c.Flags().StringVar(&o.tlsCert, prefix+"tls-cert", "", "serve HTTPS with this certificate (PEM; with --"+prefix+"tls-key)")
	c.Flags().StringVar(&o.tlsKey, prefix+"tls-key", "", "the key of --"+prefix+"tls-cert (PEM)")
}

// check resolves the token file and checks the address before anything starts.
func (o *uiOptions) check() error {
	const prefix = "ui-"
	if err := o.resolveToken(); err != nil {
		return err
	}
	if err := inspector.CheckAddr(o.listen, o.token); err != nil {
		return &usageError{err}
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return &usageError{fmt.Errorf("--%stls-cert and --%stls-key go together", prefix, prefix)}
	}
	return nil
}

// resolveToken reads --ui-token-file into token (one of the two, not both).
func (o *uiOptions) resolveToken() error {
	const prefix = "ui-"
	if o.tokenFile == "" {
		return nil
	}
	if o.token != "" {
		return &usageError{fmt.Errorf("--%stoken (or AGENTLOG_UI_TOKEN) and --%stoken-file: give one", prefix, prefix)}
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return fmt.Errorf("--%stoken-file: %w", prefix, err)
	}
	o.token, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
	if o.token = strings.TrimSpace(o.token); o.token == "" {
		return fmt.Errorf("--%stoken-file %s is empty", prefix, o.tokenFile)
	}
	return nil
}

// startUI serves the inspector over nc on o.listen until ctx ends; it prints the URL to out and
// returns it. The returned wait blocks until the server has stopped.
func startUI(ctx context.Context, nc *nats.Conn, o uiOptions, logger *slog.Logger, out io.Writer) (url string, wait func() error, err error) {
	ln, err := inspector.Listen(o.listen, o.token, o.tlsCert, o.tlsKey)
	if err != nil {
		return "", nil, err
	}
	srv, err := inspector.New(nc, inspector.Options{Token: o.token, AllowFork: o.allowFork, Logger: logger})
	if err != nil {
		ln.Close()
		return "", nil, err
	}
	if o.token != "" && len(o.token) < 16 {
		logger.Warn("agentlog ui: the token is short; use at least 16 random characters (openssl rand -hex 16)")
	}
	mode := "read-only"
	if o.allowFork {
		mode = "forks allowed"
	}
	url = inspector.URL(ln, o.token)
	fmt.Fprintf(out, "agentlog ui: %s (%s)\n", url, mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	return url, func() error { return <-done }, nil
}

func newUICmd(g *globals) *cobra.Command {
	o := uiOptions{}
	c := &cobra.Command{
		Use:   "ui [--listen HOST:PORT] [--ui-token T | --ui-token-file F] [--ui-tls-cert F --ui-tls-key F] [--allow-fork]",
		Short: "Serve the web inspector: sessions, model view beside transcript, fork tree, live tail",
		Long: `ui serves a web inspector of the sessions on --nats until SIGINT/SIGTERM: the sessions list (/), and
for each session (/sessions/ID) its events timeline, the model view (the derived messages, as
` + "`agentlog messages`" + ` serves them) beside the transcript, the projections, the fork tree and the raw log,
all updated live as events are appended. Nothing is loaded from the network; the static views work
without JavaScript.

It binds loopback by default. Any other address needs --ui-token (or --ui-token-file, or
AGENTLOG_UI_TOKEN): every request must then carry it, as "Authorization: Bearer TOKEN" or the cookie
that opening the printed URL (…/?token=TOKEN) sets; serve it over HTTPS (--ui-tls-cert,
--ui-tls-key) or behind a TLS proxy so that the token does not cross the network in clear. (The
global --token, --tls-cert and --tls-key are the NATS connection's.) It is read-only unless
--allow-fork is given.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			logger := slog.New(slog.NewTextHandler(g.stderr, nil))
			nc, _, err := g.connectWait(cmd.Context(), "agentlog-ui", logger)
			if err != nil {
				return err
			}
			defer nc.Close()
			_, wait, err := startUI(cmd.Context(), nc, o, logger, g.stdout)
			if err != nil {
				return err
			}
			if err := wait(); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	c.Flags().StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address HOST:PORT (non-loopback needs --ui-token)")
	o.addFlags(c, "allow-fork")
	return c
}
