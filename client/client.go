package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"
)

// Client calls the agentlog services over one NATS connection. It is safe for concurrent use.
type Client struct {
	nc   *nats.Conn
	base options

	stMu sync.Mutex
	st   *store.Store // opened on first use by the direct reads (sessions.go)
}

// Option configures a Client (New) or one call. Options check their input: a bad value makes
// New or the call return an error (ErrBadRequest).
type Option func(*options) error

type options struct {
	minSeq        *int64
	timeout       time.Duration
	allowDataLoss bool
	domain        string // JetStream domain of the direct reads (Domain)
	perCall       bool   // applying the options of a call, not of New
}

// Domain makes the Client's direct reads (Sessions, Messages' log reads, ...) go to JetStream
// domain d ($JS.<d>.API.>), as a client of a leaf node reaches the hub's agentlog. The service
// requests (agentlog.query.>, agentlog.fork) are core NATS and need no domain. Of New only.
func Domain(d string) Option {
	return func(o *options) error {
		if o.perCall {
			return fmt.Errorf("client.Domain is an option of New, not of a call")
		}
		if err := store.CheckDomain(d); err != nil {
			return err
		}
		o.domain = d
		return nil
	}
}

// AllowDataLoss makes Messages answer from what the session's log holds even when the log lost
// acknowledged records (by default such a session is an ErrDataLoss naming them).
func AllowDataLoss() Option {
	return func(o *options) error {
		o.allowDataLoss = true
		return nil
	}
}

// MinSeq makes a query wait until the projection has applied event seq n (read-your-writes);
// n >= 0. Without it a query answers from the projection as it is. Per call only.
func MinSeq(n int64) Option {
	return func(o *options) error {
		if !o.perCall {
			return fmt.Errorf("client.MinSeq is an option of a call, not of New")
		}
		if n < 0 {
			return fmt.Errorf("client.MinSeq(%d): want a seq >= 0", n)
		}
		o.minSeq = &n
		return nil
	}
}

// Timeout bounds a call (in New: every call) when its ctx has no earlier deadline; d > 0.
// Without it a query waits at most 10 s (plus its minSeq wait, 5 s by default) and a fork 30 s.
func Timeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("client.Timeout(%s): want a duration > 0", d)
		}
		o.timeout = d
		return nil
	}
}

// New returns a Client over nc. Errors: nc is nil, or an option is bad.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client.New: the connection is nil")
	}
	c := &Client{nc: nc}
	for _, o := range opts {
		if err := o(&c.base); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// callOptions applies a call's options over the client's.
func (c *Client) callOptions(service, id string, opts []Option) (options, error) {
	o := c.base
	o.perCall = true
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, &Error{Service: service, Code: CodeBadRequest, Session: id, Description: err.Error()}
		}
	}
	return o, nil
}

// request sends data to subject and returns the reply body, or an *Error. The trace context of
// ctx, when it has one, goes in the request's headers (traceparent, tracestate), so that the
// service's span is a child of the caller's.
func (c *Client) request(ctx context.Context, service, subject, id string, data []byte) ([]byte, error) {
	req := &nats.Msg{Subject: subject, Data: data}
	if trace.SpanContextFromContext(ctx).IsValid() {
		req.Header = nats.Header{}
		tracing.Inject(ctx, req.Header)
	}
	msg, err := c.nc.RequestMsgWithContext(ctx, req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		what := "a projector"
		if service == ForkService {
			what = "a forker"
		}
		return nil, &Error{Service: service, Code: CodeUnavailable, Session: id, Err: err,
			Description: fmt.Sprintf("no instance is serving %s (is %s running?)", subject, what)}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, &Error{Service: service, Code: CodeTimeout, Session: id, Err: err, Description: describe(service, id)}
	case err != nil:
		return nil, &Error{Service: service, Session: id, Err: err, Description: describe(service, id)}
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		e := &Error{Service: service, Code: Code(code), Session: id, Description: msg.Header.Get(micro.ErrorHeader)}
		var left struct { // a fork that may have left its child behind names it
			Child string `json:"child"`
		}
		if service == ForkService && len(msg.Data) > 0 && json.Unmarshal(msg.Data, &left) == nil {
			e.Child = left.Child
		}
		var lost DataLoss
		if h := msg.Header.Get(DataLossHeader); h != "" && json.Unmarshal([]byte(h), &lost) == nil {
			e.Lost = &lost
		}
		return nil, e
	}
	return msg.Data, nil
}

func describe(service, id string) string {
	if service == ForkService {
		return fmt.Sprintf("fork of session %q", id)
	}
	return fmt.Sprintf("session %q", id)
}

// decode unmarshals a reply body into v.
func decode(service, id string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Service: service, Code: CodeInternal, Session: id, Err: err, Description: describe(service, id) + ": malformed reply"}
	}
	return nil
}

// query sends q to a query endpoint and decodes the reply into v. Without a deadline on ctx (and
// no Timeout) it waits 10 s beyond the minSeq wait; with one, the service is asked (timeoutMs) to
// give up waiting for minSeq, or queueing behind other queries, 250 ms before it, so that it
// answers "408" or "503" first.
func (c *Client) query(ctx context.Context, subject string, q QueryRequest, o options, v any) error {
	if q.Session == "" {
		return &Error{Service: QueryService, Code: CodeBadRequest, Description: "session id is empty"}
	}
	q.MinSeq = o.minSeq
	q.AllowDataLoss = o.allowDataLoss && subject == MessagesSubject
	var cancel context.CancelFunc
	if o.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if dl, ok := ctx.Deadline(); !ok {
		wait := int64(0)
		if q.MinSeq != nil {
			wait = DefaultTimeoutMs
		}
		ctx, cancel = context.WithTimeout(ctx, time.Duration(wait)*time.Millisecond+10*time.Second)
		defer cancel()
	} else {
		// The service waits for minSeq until then, and gives up a query still queued then (503).
		ms := min(max(time.Until(dl).Milliseconds()-250, 1), MaxTimeoutMs)
		q.TimeoutMs = &ms
	}
	data, err := json.Marshal(q)
	if err != nil {
		return &Error{Service: QueryService, Code: CodeBadRequest, Session: q.Session, Err: err, Description: describe(QueryService, q.Session)}
	}
	body, err := c.request(ctx, QueryService, subject, q.Session, data)
	if err != nil {
		return err
	}
	return decode(QueryService, q.Session, body, v)
}

// Messages returns the derived messages of session id: its surface nodes and deriveMessages of
// them. A history larger than one reply is fetched in pages and returned whole (Partial nil).
// Options: MinSeq, Timeout, AllowDataLoss. Errors are *Error: ErrNotFound, ErrTimeout, ErrStopped,
// ErrTooLarge (one message larger than a reply), ErrDataLoss (the log lost acknowledged records:
// Error.Lost names them), ...
func (c *Client) Messages(ctx context.Context, id string, opts ...Option) (MessagesReply, error) {
	o, err := c.callOptions(QueryService, id, opts)
	if err != nil {
		return MessagesReply{}, err
	}
	var r MessagesReply
	if err := c.query(ctx, MessagesSubject, QueryRequest{Session: id, External: true}, o, &r); err != nil {
		return MessagesReply{}, err
	}
	if err := c.fillExternal(ctx, id, &r); err != nil {
		return MessagesReply{}, err
	}
	// The continuation pages ask for the nodes not covered yet, without waiting again.
	o.minSeq = nil
	rest := r.Nodes
	for page, first := r, true; page.Partial != nil; first = false {
		k := *page.Partial
		if k < 0 || k > len(rest) || (k == 0 && !first) { // a continuation must cover a node
			return MessagesReply{}, &Error{Service: QueryService, Code: CodeInternal, Session: id,
				Description: fmt.Sprintf("session %q: malformed reply: partial %d of %d nodes", id, k, len(rest))}
		}
		if rest = rest[k:]; len(rest) == 0 {
			break
		}
		page = MessagesReply{}
		if err := c.query(ctx, MessagesSubject, QueryRequest{Session: id, Nodes: rest, External: true}, o, &page); err != nil {
			return MessagesReply{}, err
		}
		if err := c.fillExternal(ctx, id, &page); err != nil {
			return MessagesReply{}, err
		}
		r.Messages = append(r.Messages, page.Messages...)
	}
	r.Partial = nil
	return r, nil
}

// fillExternal derives the messages a page lists in External (each too large for a reply) from
// their events, read from the log (the record at each one's stream seq, its blobs included), and
// puts them at their places in page.Messages.
func (c *Client) fillExternal(ctx context.Context, id string, page *MessagesReply) error {
	if len(page.External) == 0 {
		return nil
	}
	bad := func(format string, args ...any) error {
		return &Error{Service: QueryService, Code: CodeInternal, Session: id, Description: fmt.Sprintf("session %q: ", id) + fmt.Sprintf(format, args...)}
	}
	ss, err := c.session(ctx, id)
	if err != nil {
		return err
	}
	msgs := page.Messages
	for _, x := range page.External {
		if x.Index < 0 || x.Index > len(msgs) {
			return bad("malformed reply: external message of node %d at index %d of %d", x.Node, x.Index, len(msgs))
		}
		rec, found, err := ss.RecordFromLeader(ctx, x.StreamSeq)
		if err != nil {
			return &Error{Service: QueryService, Code: CodeInternal, Session: id, Description: fmt.Sprintf("read the event of surface node %d (stream seq %d)", x.Node, x.StreamSeq), Err: err}
		}
		var ev *session.Event
		for i := range rec.LastEvents {
			if rec.LastEvents[i].Seq == x.Node {
				ev = &rec.LastEvents[i]
			}
		}
		if !found || ev == nil {
			return bad("surface node %d is not in the record at stream seq %d (the log changed: ask again)", x.Node, x.StreamSeq)
		}
		derived, err := session.DeriveMessages([]int64{x.Node}, func(int64) (session.Event, error) { return *ev, nil })
		if err != nil || len(derived) != 1 {
			return bad("deriving the message of surface node %d: %v", x.Node, err)
		}
		msgs = slices.Insert(msgs, x.Index, derived[0])
	}
	page.Messages, page.External = msgs, nil
	return nil
}

// Surface returns the stored messages projection of session id, as stored; a stopped projection
// comes back with its Error set, not as an error. Options: MinSeq, Timeout.
func (c *Client) Surface(ctx context.Context, id string, opts ...Option) (Projection, error) {
	o, err := c.callOptions(QueryService, id, opts)
	if err != nil {
		return Projection{}, err
	}
	var p Projection
	if err := c.query(ctx, SurfaceSubject, QueryRequest{Session: id}, o, &p); err != nil {
		return Projection{}, err
	}
	return p, nil
}

// Projection returns the view of one projection unit of session id. An unknown unit is
// ErrNotFound. Options: MinSeq, Timeout.
func (c *Client) Projection(ctx context.Context, id, unit string, opts ...Option) (ProjectionReply, error) {
	o, err := c.callOptions(QueryService, id, opts)
	if err != nil {
		return ProjectionReply{}, err
	}
	if unit == "" {
		return ProjectionReply{}, &Error{Service: QueryService, Code: CodeBadRequest, Session: id, Description: "unit is empty"}
	}
	var r ProjectionReply
	if err := c.query(ctx, ProjectionSubject, QueryRequest{Session: id, Unit: unit}, o, &r); err != nil {
		return ProjectionReply{}, err
	}
	return r, nil
}

// Snapshot returns the views of every unit of session id at one consistent asOfSeq; stopped units
// come back with their error. Options: MinSeq, Timeout.
func (c *Client) Snapshot(ctx context.Context, id string, opts ...Option) (SnapshotReply, error) {
	o, err := c.callOptions(QueryService, id, opts)
	if err != nil {
		return SnapshotReply{}, err
	}
	var r SnapshotReply
	if err := c.query(ctx, SnapshotSubject, QueryRequest{Session: id}, o, &r); err != nil {
		return SnapshotReply{}, err
	}
	return r, nil
}

// Fork asks the fork service to start req.Child from a prefix of req.Source (with req.Then after
// its seed, on ForkThenSubject). A refusal is an *Error with the reference's code and exact text
// (ErrOpenTurn, ErrInvalidBoundary, ErrNotFound, ErrExists, ErrInvalidSeed); a Then event that
// breaks a rule is ErrBadRequest naming its seq and rule, and nothing is created. Options: Timeout
// (default 30 s when ctx has no deadline).
func (c *Client) Fork(ctx context.Context, req ForkRequest, opts ...Option) (ForkResult, error) {
	o, err := c.callOptions(ForkService, req.Source, opts)
	if err != nil {
		return ForkResult{}, err
	}
	if o.minSeq != nil {
		return ForkResult{}, &Error{Service: ForkService, Code: CodeBadRequest, Session: req.Source, Description: "client.MinSeq is an option of queries"}
	}
	timeout := o.timeout
	if _, ok := ctx.Deadline(); !ok && timeout == 0 {
		timeout = 30 * time.Second
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return ForkResult{}, &Error{Service: ForkService, Code: CodeBadRequest, Session: req.Source, Err: err, Description: describe(ForkService, req.Source)}
	}
	subject := ForkSubject
	if len(req.Then) > 0 {
		subject = ForkThenSubject
	}
	if max := c.nc.MaxPayload(); max > 0 && int64(len(data)) > max {
		return ForkResult{}, &Error{Service: ForkService, Code: CodeBadRequest, Session: req.Source, Err: nats.ErrMaxPayload,
			Description: tooLargeFork(req, len(data), max)}
	}
	body, err := c.request(ctx, ForkService, subject, req.Source, data)
	if err != nil {
		var ce *Error
		if subject == ForkThenSubject && errors.As(err, &ce) && ce.Code == CodeUnavailable && errors.Is(err, nats.ErrNoResponders) {
			ce.Description = fmt.Sprintf("no forker serves %s (a fork with then-events needs a forker of this version; older ones serve %s only): nothing was created", ForkThenSubject, ForkSubject)
		}
		return ForkResult{}, err
	}
	var res ForkResult
	if err := decode(ForkService, req.Source, body, &res); err != nil {
		return ForkResult{}, err
	}
	return res, nil
}

// tooLargeFork says why a fork request of n bytes is refused before it is sent: the server carries
// at most max bytes in one message, and its then-events, the largest named, are what made it big.
func tooLargeFork(req ForkRequest, n int, max int64) string {
	msg := fmt.Sprintf("fork of session %q refused, nothing was created: the request is %d bytes, above the %d bytes one message may carry (the server's max_payload)", req.Source, n, max)
	if len(req.Then) == 0 {
		return msg
	}
	total, big := 0, 0
	for i, ev := range req.Then {
		total += len(ev)
		if len(ev) > len(req.Then[big]) {
			big = i
		}
	}
	var seq struct {
		Seq *int64 `json:"seq"`
	}
	at := ""
	if json.Unmarshal(req.Then[big], &seq) == nil && seq.Seq != nil {
		at = fmt.Sprintf(" (seq %d)", *seq.Seq)
	} else if req.Boundary != nil {
		at = fmt.Sprintf(" (seq %d)", *req.Boundary+2+int64(big)) // after the seed 0..boundary and the end-seed
	}
	return msg + fmt.Sprintf("; its %d then-events are %d bytes, the largest, then-event %d of %d%s, %d bytes [rule %s]: fork without it and append it after (`agentlog append`, or publisher.Append: they offload large events)",
		len(req.Then), total, big+1, len(req.Then), at, len(req.Then[big]), session.RuleEventTooLarge)
}
