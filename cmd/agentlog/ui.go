package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/inspector"
	"github.com/spf13/cobra"
)

// uiOptions are the web inspector's flags: --ui-token, --ui-token-file, --ui-tls-cert and
// --ui-tls-key on both commands (the global --token, --tls-cert and --tls-key are NATS's); on
// `agentlog ui` with --listen, --allow-fork and --allow-admin, on `agentlog dev` with --ui,
// --ui-allow-fork and --ui-allow-admin.
type uiOptions struct {
	devstack.UIOptions
	tokenFile string
}

func (o *uiOptions) addFlags(c *cobra.Command, allowFork, allowAdmin string) {
	const prefix = "ui-"
	c.Flags().StringVar(&o.Token, prefix+"token", os.Getenv("AGENTLOG_UI_TOKEN"), "token every request must carry (Authorization: Bearer, or the cookie ?token= sets); required for a non-loopback address (env AGENTLOG_UI_TOKEN; a flag is visible to ps, prefer --"+prefix+"token-file)")
	c.Flags().StringVar(&o.tokenFile, prefix+"token-file", "", "read the token from this file (first line)")
	c.Flags().BoolVar(&o.AllowFork, allowFork, false, "enable \"fork from here\" and edit-then-fork (without it the inspector is read-only)")
	c.Flags().BoolVar(&o.AllowAdmin, allowAdmin, false, "enable the operator actions: rebuild a session's projection unit from its log (needs the rights of agentlog rebuild)")
	c.Flags().StringVar(&o.TLSCert, prefix+"tls-cert", "", "serve HTTPS with this certificate (PEM; with --"+prefix+"tls-key)")
	c.Flags().StringVar(&o.TLSKey, prefix+"tls-key", "", "the key of --"+prefix+"tls-cert (PEM)")
}

// check resolves the token file and checks the address before anything starts.
func (o *uiOptions) check() error {
	const prefix = "ui-"
	if err := o.resolveToken(); err != nil {
		return err
	}
	if err := inspector.CheckAddr(o.Listen, o.Token); err != nil {
		return &usageError{err}
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
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
	if o.Token != "" {
		return &usageError{fmt.Errorf("--%stoken (or AGENTLOG_UI_TOKEN) and --%stoken-file: give one", prefix, prefix)}
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return fmt.Errorf("--%stoken-file: %w", prefix, err)
	}
	o.Token, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
	if o.Token = strings.TrimSpace(o.Token); o.Token == "" {
		return fmt.Errorf("--%stoken-file %s is empty", prefix, o.tokenFile)
	}
	return nil
}

// printUI prints the inspector's URL and mode to out.
func printUI(out io.Writer, u *devstack.UI, o devstack.UIOptions) {
	var modes []string
	if o.AllowFork {
		modes = append(modes, "forks allowed")
	}
	if o.AllowAdmin {
		modes = append(modes, "operator actions allowed")
	}
	mode := strings.Join(modes, ", ")
	if mode == "" {
		mode = "read-only"
	}
	fmt.Fprintf(out, "agentlog ui: %s (%s)\n", u.URL(), mode)
}

func newUICmd(g *globals) *cobra.Command {
	o := uiOptions{}
	c := &cobra.Command{
		Use:   "ui [--listen HOST:PORT] [--ui-token T | --ui-token-file F] [--ui-tls-cert F --ui-tls-key F] [--allow-fork] [--allow-admin]",
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
--allow-fork is given ("fork from here" and "fork from here and edit the next message"), and
--allow-admin enables the operator actions (rebuilding one session's projection unit, as
` + "`agentlog rebuild UNIT --session ID`" + ` does); both are POSTs checked for the same origin and the
page's CSRF token.`,
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
			o.UIOptions.Domain = g.conn.jsDomain
			u, err := devstack.StartUI(cmd.Context(), nc, o.UIOptions, logger)
			if err != nil {
				return err
			}
			printUI(g.stdout, u, o.UIOptions)
			if err := u.Wait(); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	c.Flags().StringVar(&o.Listen, "listen", "127.0.0.1:8080", "HTTP listen address HOST:PORT (non-loopback needs --ui-token)")
	o.addFlags(c, "allow-fork", "allow-admin")
	return c
}
