package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// MessagesReply is the reply of the messages endpoint: the session, the projection's asOfSeq and
// replaceGeneration, the surface nodes (seqs; for a request with Nodes, those) and deriveMessages
// of those nodes, one message per node that derives one.
//
// One reply carries at most the server's max payload (1 MiB by default). When the messages do not
// fit, Partial is set to k: Messages then holds the messages of the first k nodes asked for only
// (k may be 0 on a first page), and a request with Nodes = the nodes not covered yet continues. A
// first page's Nodes are all the projection's nodes; a continuation's are the nodes it covers. The
// events of surface nodes never change (the log is append-only), so the pages of one query are
// consistent with its first reply's asOfSeq. QueryMessages does this paging itself and returns
// the whole history.
type MessagesReply struct {
	Session           string            `json:"session"`
	AsOfSeq           int64             `json:"asOfSeq"`
	ReplaceGeneration int64             `json:"replaceGeneration"`
	Nodes             []int64           `json:"nodes"`
	Messages          []json.RawMessage `json:"messages"`
	Partial           *int              `json:"partial,omitempty"`
}

// QueryError is an error reply of the agentlog-query service: Code is one of the Code* constants,
// Description names the session.
type QueryError struct {
	Code        string
	Description string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("%s: %s (code %s)", QueryService, e.Description, e.Code)
}

// request sends q to subject and returns the reply body, or a *QueryError for an error reply.
func request(ctx context.Context, nc *nats.Conn, subject string, q QueryRequest) ([]byte, error) {
	if q.Session == "" {
		return nil, errors.New("agentlog-query: session id is empty")
	}
	if _, ok := ctx.Deadline(); !ok {
		wait := int64(0)
		if q.MinSeq != nil {
			wait = DefaultTimeoutMs
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(wait)*time.Millisecond+10*time.Second)
		defer cancel()
	} else if q.MinSeq != nil {
		// Let the service answer "408" before the client gives up.
		dl, _ := ctx.Deadline()
		ms := time.Until(dl).Milliseconds() - 250
		if ms < 1 {
			ms = 1
		}
		ms = min(ms, MaxTimeoutMs)
		q.TimeoutMs = &ms
	}
	data, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%s: no instance is serving %s (is a projector running?): %w", QueryService, subject, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: session %q: %w", QueryService, q.Session, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &QueryError{Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	return msg.Data, nil
}

// QueryMessages asks the agentlog-query service for the derived messages of session id. With
// minSeq >= 0 the service waits until the projection has applied seq minSeq (bounded by ctx's
// deadline, else 5000 ms); minSeq -1 does not wait. Error replies come back as *QueryError. A
// history larger than one reply is fetched in pages (MessagesReply.Partial) and returned whole;
// only a single message larger than the server's max payload is refused ("413", naming its seq).
func QueryMessages(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (MessagesReply, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	r, err := queryMessagesPage(ctx, nc, q)
	if err != nil {
		return MessagesReply{}, err
	}
	// A history larger than one reply comes in pages: ask for the messages of the nodes not
	// covered yet until none is left.
	rest := r.Nodes
	for page, firstPage := r, true; page.Partial != nil; firstPage = false {
		k := *page.Partial
		if k < 0 || k > len(rest) || (k == 0 && !firstPage) { // a continuation must cover a node
			return MessagesReply{}, fmt.Errorf("%s: session %q: malformed reply: partial %d of %d nodes", QueryService, id, k, len(rest))
		}
		if rest = rest[k:]; len(rest) == 0 {
			break
		}
		if page, err = queryMessagesPage(ctx, nc, QueryRequest{Session: id, Nodes: rest}); err != nil {
			return MessagesReply{}, err
		}
		r.Messages = append(r.Messages, page.Messages...)
	}
	r.Partial = nil
	return r, nil
}

// queryMessagesPage sends one request to the messages endpoint.
func queryMessagesPage(ctx context.Context, nc *nats.Conn, q QueryRequest) (MessagesReply, error) {
	body, err := request(ctx, nc, MessagesSubject, q)
	if err != nil {
		return MessagesReply{}, err
	}
	var r MessagesReply
	if err := json.Unmarshal(body, &r); err != nil {
		return MessagesReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, q.Session, err)
	}
	return r, nil
}

// QuerySurface asks the agentlog-query service for the stored projection of session id (the
// value of "messages.<token>" in agentlog_projections); minSeq as in QueryMessages. A stopped
// projection is returned with its Error set, not as an error.
func QuerySurface(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (Projection, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, SurfaceSubject, q)
	if err != nil {
		return Projection{}, err
	}
	var pr Projection
	if err := json.Unmarshal(body, &pr); err != nil {
		return Projection{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return pr, nil
}

// Endpoints of the projection units.
const (
	ProjectionSubject = "agentlog.query.projection" // one unit's view: ProjectionReply
	SnapshotSubject   = "agentlog.query.snapshot"   // every unit's view at one asOfSeq: SnapshotReply
)

// UnitView is one unit's part of a snapshot: its stateVersion, its asOfSeq (the snapshot's, or
// lower for a stopped unit), its view (Def.View of its state) and, for a stopped unit, its error.
type UnitView struct {
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	View         json.RawMessage  `json:"view"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// SnapshotReply is the reply of the snapshot endpoint: the views of every registered unit of a
// session at one consistent asOfSeq (units stopped by an error may stand lower, with their error).
type SnapshotReply struct {
	Session string              `json:"session"`
	AsOfSeq int64               `json:"asOfSeq"`
	Units   map[string]UnitView `json:"units"`
}

// ProjectionReply is the reply of the projection endpoint: one unit's view of a session.
type ProjectionReply struct {
	Session string `json:"session"`
	Unit    string `json:"unit"`
	UnitView
}

// QuerySnapshot asks the agentlog-query service for the views of every unit of session id at one
// consistent asOfSeq; minSeq as in QueryMessages. Stopped units come back with their error.
func QuerySnapshot(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (SnapshotReply, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, SnapshotSubject, q)
	if err != nil {
		return SnapshotReply{}, err
	}
	var r SnapshotReply
	if err := json.Unmarshal(body, &r); err != nil {
		return SnapshotReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return r, nil
}

// QueryProjection asks the agentlog-query service for the view of one unit of session id; minSeq
// as in QueryMessages. An unknown unit is a *QueryError "404".
func QueryProjection(ctx context.Context, nc *nats.Conn, id, unit string, minSeq int64) (ProjectionReply, error) {
	if unit == "" {
		return ProjectionReply{}, errors.New("agentlog-query: unit is empty")
	}
	q := QueryRequest{Session: id, Unit: unit}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, ProjectionSubject, q)
	if err != nil {
		return ProjectionReply{}, err
	}
	var r ProjectionReply
	if err := json.Unmarshal(body, &r); err != nil {
		return ProjectionReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return r, nil
}
