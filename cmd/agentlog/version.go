package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// versionInfo is what `agentlog version` prints.
type versionInfo struct {
	Module        string `json:"module"`
	Version       string `json:"version"`            // the module version, "(devel)" for a local build
	Revision      string `json:"revision,omitempty"` // vcs.revision, with "+dirty" when modified
	Go            string `json:"go"`
	NATSServer    string `json:"natsServer"` // the nats-server linked (agentlog dev)
	NATSClient    string `json:"natsClient"` // nats.go
	RecordFormat  string `json:"recordFormat"`
	SessionFormat int    `json:"sessionFormat"` // the dsh session log's format version
}

func buildVersion() versionInfo {
	v := versionInfo{Module: "github.com/agentlog/agentlog", Version: "(unknown)", Go: runtime.Version(),
		NATSServer: server.VERSION, NATSClient: nats.Version, RecordFormat: wire.RecordFormat, SessionFormat: 0}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module, v.Version = bi.Main.Path, bi.Main.Version
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && v.Revision != "" {
			v.Revision += "+dirty"
		}
	}
	return v
}

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the agentlog, Go and nats-server versions and the record format",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			if asJSON {
				return writeJSON(g.stdout, v, false)
			}
			rev := ""
			if v.Revision != "" {
				rev = " " + v.Revision
			}
			_, err := fmt.Fprintf(g.stdout, "agentlog %s%s (%s)\n%s, nats-server %s, nats.go %s\nrecord format %s, session format %d\n",
				v.Version, rev, v.Module, v.Go, v.NATSServer, v.NATSClient, v.RecordFormat, v.SessionFormat)
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object")
	return c
}
