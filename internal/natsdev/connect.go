package natsdev

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Connect dials url (one URL or several, comma separated) and returns the connection and a
// JetStream handle; close the connection when done. opts (nats.Name, nats.UserCredentials,
// nats.Secure, ...) apply after the defaults, which they may override.
//
// Defaults: a 5 s dial timeout (a wrong URL is reported at once), then reconnect forever every
// 250 ms plus jitter, buffering up to 8 MiB of publishes while reconnecting.
func Connect(url string, opts ...nats.Option) (*nats.Conn, natsjs.JetStream, error) {
	return ConnectDomain(url, "", opts...)
}

// ConnectDomain is Connect with a JetStream handle for JetStream domain domain ("": the
// account's own; see store.NewJetStream), as a client of a leaf node uses to reach the hub's (store.NewJetStream does the same
// over a connection of its own; natsdev is below store, whose tests use it).
func ConnectDomain(url, domain string, opts ...nats.Option) (*nats.Conn, natsjs.JetStream, error) {
	all := append([]nats.Option{
		nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(8 << 20),
	}, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	var js natsjs.JetStream
	switch {
	case domain == "":
		js, err = natsjs.New(nc)
	case strings.ContainsAny(domain, ". \t\r\n*>"):
		err = fmt.Errorf("JetStream domain %q: a domain is one subject token (no '.', '*', '>' or white space)", domain)
	default:
		js, err = natsjs.NewWithDomain(nc, domain)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("JetStream on %s: %w", url, err)
	}
	return nc, js, nil
}
