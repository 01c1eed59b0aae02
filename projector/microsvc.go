package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
)

// service serves the NATS micro protocol ($SRV.PING, $SRV.INFO, $SRV.STATS) for agentlog-query
// itself: nats.go/micro counts a reply in its stats only when the handler sends it before
// returning, and queries are answered from goroutines. Every reply, success or error, goes
// through endpointStats.record.
type service struct {
	nc      *nats.Conn
	ident   micro.ServiceIdentity
	desc    string
	started time.Time

	mu      sync.Mutex
	eps     []*endpointStats
	control []*nats.Subscription
	stopped bool
}

// endpointStats is one endpoint: its subscription and its micro stats (guarded by service.mu).
type endpointStats struct {
	svc   *service
	sub   *nats.Subscription
	stats micro.EndpointStats
}

func newService(nc *nats.Conn, cfg micro.Config) (*service, error) {
	s := &service{nc: nc, desc: cfg.Description, started: time.Now().UTC(),
		ident: micro.ServiceIdentity{Name: cfg.Name, ID: nuid.Next(), Version: cfg.Version, Metadata: cfg.Metadata}}
	verbs := map[micro.Verb]func() any{
		micro.PingVerb:  func() any { return micro.Ping{ServiceIdentity: s.identity(), Type: micro.PingResponseType} },
		micro.InfoVerb:  s.info,
		micro.StatsVerb: s.statsReply,
	}
	for verb, reply := range verbs {
		for _, subj := range []struct{ name, id string }{{"", ""}, {s.ident.Name, ""}, {s.ident.Name, s.ident.ID}} {
			subject, err := micro.ControlSubject(verb, subj.name, subj.id)
			if err == nil {
				var sub *nats.Subscription
				sub, err = nc.Subscribe(subject, func(m *nats.Msg) {
					b, _ := json.Marshal(reply())
					_ = m.Respond(b)
				})
				s.control = append(s.control, sub)
			}
			if err != nil {
				_ = s.Stop()
				return nil, fmt.Errorf("subscribing to %s: %w", subject, err)
			}
		}
	}
	return s, nil
}

// addEndpoint subscribes h to subject in queue group "q", with the given pending limits.
func (s *service) addEndpoint(name, subject string, h func(*endpointStats, *nats.Msg), msgLimit, bytesLimit int) error {
	ep := &endpointStats{svc: s, stats: micro.EndpointStats{Name: name, Subject: subject, QueueGroup: micro.DefaultQueueGroup}}
	sub, err := s.nc.QueueSubscribe(subject, micro.DefaultQueueGroup, func(m *nats.Msg) { h(ep, m) })
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(msgLimit, bytesLimit); err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	ep.sub = sub
	s.mu.Lock()
	s.eps = append(s.eps, ep)
	s.mu.Unlock()
	return nil
}

// record counts one request answered after d; code and desc are those of an error reply ("": a
// success).
func (e *endpointStats) record(d time.Duration, code, desc string) {
	e.svc.mu.Lock()
	defer e.svc.mu.Unlock()
	st := &e.stats
	st.NumRequests++
	st.ProcessingTime += d
	st.AverageProcessingTime = st.ProcessingTime / time.Duration(st.NumRequests)
	if code != "" {
		st.NumErrors++
		st.LastError = code + ":" + desc
	}
}

func (s *service) identity() micro.ServiceIdentity {
	id := s.ident
	id.Metadata = maps.Clone(id.Metadata)
	return id
}

func (s *service) info() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	eps := make([]micro.EndpointInfo, 0, len(s.eps))
	for _, e := range s.eps {
		eps = append(eps, micro.EndpointInfo{Name: e.stats.Name, Subject: e.stats.Subject, QueueGroup: e.stats.QueueGroup})
	}
	return micro.Info{ServiceIdentity: s.identity(), Type: micro.InfoResponseType, Description: s.desc, Endpoints: eps}
}

func (s *service) statsReply() any { return s.Stats() }

// Stats returns the service's stats, as $SRV.STATS answers them.
func (s *service) Stats() micro.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := micro.Stats{ServiceIdentity: s.identity(), Type: micro.StatsResponseType, Started: s.started, Endpoints: make([]*micro.EndpointStats, 0, len(s.eps))}
	for _, e := range s.eps {
		c := e.stats
		st.Endpoints = append(st.Endpoints, &c)
	}
	return st
}

// Stop drains the endpoints' subscriptions (the requests received are still handled, as by
// micro) and ends the control subscriptions.
func (s *service) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	eps, control := s.eps, s.control
	s.mu.Unlock()
	var errs []error
	for _, e := range eps {
		if err := e.sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, fmt.Errorf("draining %s: %w", e.stats.Subject, err))
		}
	}
	for _, sub := range control {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}
	return errors.Join(errs...)
}
