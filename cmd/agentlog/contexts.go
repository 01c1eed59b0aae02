package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A context is a saved set of connection settings, as the nats CLI's contexts are: the NATS URLs,
// the credentials and the TLS files, under a name, in the user's configuration directory
// (os.UserConfigDir()/agentlog: $XDG_CONFIG_HOME/agentlog or ~/.config/agentlog on Linux), one
// file per context, context/NAME.json (mode 0600, its directories 0700, as it may hold a
// password), and the selected one's name in context.txt. The selected context (or --context NAME,
// or AGENTLOG_CONTEXT) supplies the settings that no flag or environment variable gives.

// connContext is one saved context: the value of each connection setting (by flag name) and a
// description.
type connContext struct {
	Description string            `json:"description,omitempty"`
	Settings    map[string]string `json:"settings"`
}

// contextEnv names a context for one command, as --context does.
const contextEnv = "AGENTLOG_CONTEXT"

var contextName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// contextDir is where contexts live: os.UserConfigDir()/agentlog.
func contextDir() (string, error) {
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("contexts: no configuration directory: %w (set XDG_CONFIG_HOME or HOME)", err)
	}
	return filepath.Join(base, "agentlog"), nil
}

func checkContextName(name string) error {
	if !contextName.MatchString(name) {
		return &usageError{fmt.Errorf("context name %q: use 1 to 64 letters, digits, '.', '_' or '-' (not starting with '.' or '-')", name)}
	}
	return nil
}

func contextPath(dir, name string) string { return filepath.Join(dir, "context", name+".json") }

// loadContext reads context name.
func loadContext(name string) (connContext, error) {
	dir, err := contextDir()
	if err != nil {
		return connContext{}, err
	}
	b, err := os.ReadFile(contextPath(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return connContext{}, fmt.Errorf("context %q does not exist (agentlog context ls lists them)", name)
	}
	if err != nil {
		return connContext{}, fmt.Errorf("context %q: %w", name, err)
	}
	var c connContext
	if err := json.Unmarshal(b, &c); err != nil {
		return connContext{}, fmt.Errorf("context %q (%s): %w", name, contextPath(dir, name), err)
	}
	return c, nil
}

// selectedContext is the selected context's name ("" when none is).
func selectedContext() (string, error) {
	dir, err := contextDir()
	if err != nil {
		return "", nil // no configuration directory: no context selected
	}
	b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("contexts: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// activeContext returns the context that supplies defaults to this command: --context, else
// AGENTLOG_CONTEXT, else the selected one; its name is "" when there is none.
func activeContext(flagValue string) (string, connContext, error) {
	name, from := flagValue, "--context"
	if name == "" {
		name, from = os.Getenv(contextEnv), contextEnv
	}
	if name == "" {
		var err error
		if name, err = selectedContext(); err != nil || name == "" {
			return "", connContext{}, err
		}
		from = "the selected context (agentlog context select)"
	}
	if err := checkContextName(name); err != nil {
		return "", connContext{}, err
	}
	c, err := loadContext(name)
	if err != nil {
		return "", connContext{}, &usageError{fmt.Errorf("%s: %w", from, err)}
	}
	return name, c, nil
}

// writeFile0600 writes b to path atomically (a temporary file renamed), mode 0600, creating its
// directories with mode 0700.
func writeFile0600(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// contextFileSettings are the settings whose values are file paths: a context stores them absolute.
var contextFileSettings = map[string]bool{"creds": true, "nkey": true, "tls-ca": true, "tls-cert": true, "tls-key": true}

func newContextCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "context save|select|ls|rm",
		Short: "Save, select, list and remove named connection settings (URL, credentials, TLS), as nats context does",
		Long: `A context is a named set of connection settings: the NATS URL(s), the credentials (--creds, --nkey,
--user and --password, --token) and the TLS files (--tls-ca, --tls-cert, --tls-key). Contexts live in
the user's configuration directory, ` + "`os.UserConfigDir()/agentlog`" + ` ($XDG_CONFIG_HOME/agentlog, else
~/.config/agentlog on Linux): context/NAME.json per context, mode 0600 in directories of mode 0700 (a
context may hold a password or token), and context.txt naming the selected one.

The selected context, or the one --context NAME or AGENTLOG_CONTEXT names, supplies every setting that
no flag and no environment variable gives. Precedence, for each setting: its flag, then
AGENTLOG_NATS_*, then NATS_*, then the context, then the default; the credentials come as a whole from
the first of these that sets any of them.

  agentlog context save prod --nats tls://n1:4222 --creds ~/prod.creds --tls-ca ~/ca.pem
  agentlog context select prod
  agentlog sessions                    # through prod
  agentlog --context dev status s1     # another one, for one command`,
	}
	markContextCmd(root)

	var desc string
	var selectToo bool
	save := &cobra.Command{
		Use:   "save NAME [connection flags] [--description TEXT] [--select]",
		Short: "Save the connection settings given as flags or environment variables under NAME (replacing it)",
		Long: `save stores the connection settings this command was given, as flags (--nats, --creds, --nkey,
--user, --password, --token, --tls-ca, --tls-cert, --tls-key) or environment variables (AGENTLOG_NATS_*,
NATS_*), as context NAME; another context (selected or --context) is not read. File paths are stored
absolute. A context of that name is replaced. It connects to nothing.`,
		Args: exactArgs(1, "one context NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkContextName(name); err != nil {
				return err
			}
			settings, err := g.conn.given(g, cmd.Root().PersistentFlags())
			if err != nil {
				return err
			}
			for k, v := range settings {
				if contextFileSettings[k] {
					abs, err := filepath.Abs(v)
					if err != nil {
						return &usageError{fmt.Errorf("--%s %s: %w", k, v, err)}
					}
					settings[k] = abs
				}
			}
			b, err := json.MarshalIndent(connContext{Description: desc, Settings: settings}, "", "  ")
			if err != nil {
				return err
			}
			dir, err := contextDir()
			if err != nil {
				return err
			}
			if err := writeFile0600(contextPath(dir, name), append(b, '\n')); err != nil {
				return fmt.Errorf("saving context %q: %w", name, err)
			}
			fmt.Fprintf(g.stdout, "saved context %q in %s\n", name, contextPath(dir, name))
			if selectToo {
				return selectContext(g, dir, name)
			}
			return nil
		},
	}
	save.Flags().StringVar(&desc, "description", "", "what the context is for")
	save.Flags().BoolVar(&selectToo, "select", false, "select it too")

	var none bool
	sel := &cobra.Command{
		Use:   "select NAME | --none",
		Short: "Select the context whose settings every command uses by default (--none: no context)",
		Args: func(c *cobra.Command, args []string) error {
			if none {
				return exactArgs(0, "no NAME with --none")(c, args)
			}
			return exactArgs(1, "one context NAME")(c, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := contextDir()
			if err != nil {
				return err
			}
			if none {
				if err := os.Remove(filepath.Join(dir, "context.txt")); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				fmt.Fprintln(g.stdout, "no context selected")
				return nil
			}
			if err := checkContextName(args[0]); err != nil {
				return err
			}
			if _, err := loadContext(args[0]); err != nil {
				return err
			}
			return selectContext(g, dir, args[0])
		},
	}
	sel.Flags().BoolVar(&none, "none", false, "select no context")

	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the saved contexts: name (* selected), URL (and JetStream domain), credentials, TLS, description",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := contextDir()
			if err != nil {
				return err
			}
			entries, err := os.ReadDir(filepath.Join(dir, "context"))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			selected, _ := selectedContext()
			type row struct {
				Name        string `json:"name"`
				Selected    bool   `json:"selected"`
				URL         string `json:"url"`
				Credentials string `json:"credentials"`
				TLS         bool   `json:"tls"`
				Domain      string `json:"jsDomain,omitempty"`
				Description string `json:"description,omitempty"`
			}
			var rows []row
			for _, e := range entries {
				name, ok := strings.CutSuffix(e.Name(), ".json")
				if !ok || !contextName.MatchString(name) {
					continue
				}
				c, err := loadContext(name)
				if err != nil {
					return err
				}
				r := row{Name: name, Selected: name == selected, URL: c.Settings["nats"], Credentials: "none", Domain: c.Settings["js-domain"], Description: c.Description}
				for _, k := range []string{"creds", "nkey", "user", "token"} {
					if c.Settings[k] != "" {
						r.Credentials = k
					}
				}
				r.TLS = c.Settings["tls-ca"] != "" || c.Settings["tls-cert"] != "" || strings.HasPrefix(r.URL, "tls://")
				rows = append(rows, r)
			}
			sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
			if asJSON {
				if rows == nil {
					rows = []row{}
				}
				return writeJSON(g.stdout, rows, false)
			}
			if len(rows) == 0 {
				fmt.Fprintf(g.stdout, "no contexts in %s (agentlog context save NAME --nats URL ... saves one)\n", filepath.Join(dir, "context"))
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tURL\tCREDENTIALS\tTLS\tDESCRIPTION")
			for _, r := range rows {
				name := r.Name
				if r.Selected {
					name += " *"
				}
				tls := "no"
				if r.TLS {
					tls = "yes"
				}
				u := dash(redactURL(r.URL))
				if r.Domain != "" {
					u += " (js-domain " + r.Domain + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, u, r.Credentials, tls, dash(oneLine(r.Description)))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, `one JSON array of {"name","selected","url","credentials","tls","description"?}`)

	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a saved context (and unselect it)",
		Args:  exactArgs(1, "one context NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkContextName(args[0]); err != nil {
				return err
			}
			dir, err := contextDir()
			if err != nil {
				return err
			}
			if err := os.Remove(contextPath(dir, args[0])); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("context %q does not exist", args[0])
			} else if err != nil {
				return err
			}
			if sel, _ := selectedContext(); sel == args[0] {
				_ = os.Remove(filepath.Join(dir, "context.txt"))
				fmt.Fprintf(g.stdout, "removed context %q (it was selected: no context is now)\n", args[0])
				return nil
			}
			fmt.Fprintf(g.stdout, "removed context %q\n", args[0])
			return nil
		},
	}
	root.AddCommand(save, sel, ls, rm)
	for _, c := range root.Commands() {
		markContextCmd(c)
	}
	return root
}

func selectContext(g *globals, dir, name string) error {
	if err := writeFile0600(filepath.Join(dir, "context.txt"), []byte(name+"\n")); err != nil {
		return fmt.Errorf("selecting context %q: %w", name, err)
	}
	fmt.Fprintf(g.stdout, "selected context %q\n", name)
	return nil
}

// contextAnnotation marks the context commands: they never dial NATS, and their connection flags
// are what `context save` saves (PersistentPreRunE does not resolve them).
const contextAnnotation = "agentlog.context"

func markContextCmd(c *cobra.Command) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[contextAnnotation] = "true"
}

func isContextCmd(c *cobra.Command) bool { return c.Annotations[contextAnnotation] == "true" }

// given returns the connection settings given to this command as flags or environment variables
// (not a context), resolved as a connection would be (one set of credentials, user info moved out
// of the URL), by flag name; empty ones are left out.
func (f *connFlags) given(g *globals, fs *pflag.FlagSet) (map[string]string, error) {
	f.noContext = true
	if err := f.resolve(g, fs); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range f.settings(g) {
		if *s.dst != "" {
			out[s.flag] = *s.dst
		}
	}
	return out, nil
}
