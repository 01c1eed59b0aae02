package devstack

import (
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// URL is the embedded server's client URL.
func (s *Stack) URL() string { return s.url }

// Conn is the stack's own connection (the services use it).
func (s *Stack) Conn() *nats.Conn { return s.nc }

// Store is the provisioned store on Conn.
func (s *Stack) Store() *store.Store { return s.store }

// Server is the embedded nats-server.
func (s *Stack) Server() *server.Server { return s.srv }

// Projectors are the running projector instances (Options.Projectors of them).
func (s *Stack) Projectors() []*projector.Projector { return s.projectors }

// Forkers are the running forker instances (Options.Forkers of them).
func (s *Stack) Forkers() []*forker.Forker { return s.forkers }

// UI is the inspector Start started (nil without Options.UI.Listen).
func (s *Stack) UI() *UI { return s.ui }
