package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/agentlog/agentlog/internal/obs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// addMetricsFlag adds --metrics-addr to a service command.
func addMetricsFlag(c *cobra.Command, addr *string) {
	c.Flags().StringVar(addr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on HOST:PORT (off by default)")
}

// observer is a process's metrics registry and its HTTP server (nil when --metrics-addr is off;
// its methods then do nothing).
type observer struct {
	reg *prometheus.Registry
	srv *obs.Server
}

// startObserver serves /metrics, /healthz and /readyz on addr; /readyz says "starting" until
// setReady. An empty addr serves nothing (nil observer).
func startObserver(addr string, stdout io.Writer) (*observer, error) {
	if addr == "" {
		return nil, nil
	}
	reg := obs.NewRegistry()
	srv, err := obs.Serve(addr, reg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "  metrics: http://%s/metrics (and /healthz, /readyz)\n", srv.Addr())
	return &observer{reg: reg, srv: srv}, nil
}

func (o *observer) register(cs ...prometheus.Collector) {
	if o != nil {
		o.reg.MustRegister(cs...)
	}
}

// registerer is the process's registry (nil when off).
func (o *observer) registerer() prometheus.Registerer {
	if o == nil {
		return nil
	}
	return o.reg
}

func (o *observer) setReady(f obs.ReadyFunc) {
	if o != nil {
		o.srv.SetReady(f)
	}
}

// notReady is a readiness that is always why.
func notReady(why string) obs.ReadyFunc {
	return func(context.Context) error { return errors.New(why) }
}

// Close stops the HTTP server gracefully.
func (o *observer) Close() error {
	if o == nil {
		return nil
	}
	return o.srv.Close()
}

// SystemAccountFile is the file in the dev data directory holding the system user's generated
// password.
const SystemAccountFile = "system-account.json"

type systemAccount struct {
	User     string `json:"user"`
	Password string `json:"password"`
}

// devSystemPassword returns the password of the system user for dev: the one stored in dir for
// that user, else a new one, stored there.
func devSystemPassword(dir, user string) (string, error) {
	path := filepath.Join(dir, SystemAccountFile)
	var sa systemAccount
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &sa) == nil && sa.User == user && sa.Password != "" {
		return sa.Password, nil
	}
	buf := make([]byte, 12)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	sa = systemAccount{User: user, Password: hex.EncodeToString(buf)}
	b, _ := json.MarshalIndent(sa, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("writing the system account's password: %w", err)
	}
	return sa.Password, nil
}
