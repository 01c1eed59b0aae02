package client

import (
	"encoding/json"

	"github.com/agentlog/agentlog/session"
)

// Names and subjects of the agentlog micro services.
const (
	QueryService      = "agentlog-query"
	MessagesSubject   = "agentlog.query.messages"   // derived messages: MessagesReply
	SurfaceSubject    = "agentlog.query.surface"    // the stored messages value: Projection
	ProjectionSubject = "agentlog.query.projection" // one unit's view: ProjectionReply
	SnapshotSubject   = "agentlog.query.snapshot"   // every unit's view at one asOfSeq: SnapshotReply

	ForkService     = "agentlog-fork"
	ForkSubject     = "agentlog.fork"      // ForkRequest in, ForkResult out
	ForkThenSubject = "agentlog.fork.then" // a ForkRequest with Then (forkers that predate it do not serve it)
)

// Query waits for minSeq, in milliseconds: the default when a request gives no timeoutMs, and the
// longest a request may ask for.
const (
	DefaultTimeoutMs = 5000
	MaxTimeoutMs     = 60000
)

// QueryRequest is the request of the query endpoints: {"session", "minSeq"?, "timeoutMs"?,
// "unit"?, "nodes"?}. With MinSeq >= 0 the service waits (at most TimeoutMs ms) until the
// projection has applied that seq. TimeoutMs (default DefaultTimeoutMs) also bounds how long a
// query may queue behind others: one not begun by then is answered CodeUnavailable. Unit is for the projection endpoint; Nodes (messages only)
// continues a partial reply: the surface nodes whose messages are still wanted.
type QueryRequest struct {
	Session   string  `json:"session"`
	MinSeq    *int64  `json:"minSeq,omitempty"`
	TimeoutMs *int64  `json:"timeoutMs,omitempty"`
	Unit      string  `json:"unit,omitempty"`
	Nodes     []int64 `json:"nodes,omitempty"`
	// External (messages only): the client reads a message too large for any reply from the log
	// itself, so the service lists it in MessagesReply.External instead of failing 413.
	External bool `json:"external,omitempty"`
	// AllowDataLoss (messages only): answer from what the log holds even when it lost
	// acknowledged records (by default that is a CodeDataLoss error naming them).
	AllowDataLoss bool `json:"allowDataLoss,omitempty"`
}

// MessagesReply is the reply of the messages endpoint: the projection's asOfSeq and
// replaceGeneration, its surface nodes (seqs) and the messages derived from them. A reply that
// does not fit one NATS message has Partial = k: Messages covers the first k Nodes only, and a
// request with Nodes = the rest continues (Client.Messages joins the pages).
type MessagesReply struct {
	Session           string            `json:"session"`
	AsOfSeq           int64             `json:"asOfSeq"`
	ReplaceGeneration int64             `json:"replaceGeneration"`
	Nodes             []int64           `json:"nodes"`
	Messages          []json.RawMessage `json:"messages"`
	Partial           *int              `json:"partial,omitempty"`
	// External (only when the request asked for it) lists the messages of this page left out of
	// Messages because one alone is larger than a reply (an offloaded event's): each goes at its
	// Index of the page's Messages, in order, derived from its node's event in the record at
	// StreamSeq. Client.Messages fills them in and returns External nil.
	External []ExternalMessage `json:"external,omitempty"`
}

// ExternalMessage is a message of a messages reply that the client derives itself from the log:
// the surface node Node's event is in the AGENTLOG record at stream seq StreamSeq, and its
// message goes at Index of the page's Messages.
type ExternalMessage struct {
	Index     int    `json:"index"`
	Node      int64  `json:"node"`
	StreamSeq uint64 `json:"streamSeq"`
}

// State is the stored state of the messages unit: surface nodes (seqs, in model-visible order),
// replaceGeneration, transcript (seqs of append-origin surface events) and the open turn, or nil.
type State struct {
	Nodes             []int64 `json:"nodes"`
	ReplaceGeneration int64   `json:"replaceGeneration"`
	Transcript        []int64 `json:"transcript"`
	OpenTurn          *int64  `json:"openTurn"`
	// NodeRecords, when present, is the AGENTLOG stream seq of the record holding each node (in
	// Nodes' order): a reader of the nodes' events gets those records only.
	NodeRecords []uint64 `json:"nodeRecords,omitempty"`
}

// ProjectionError is why a session's projection stopped: the seq of the first event not applied,
// the rule it broke and the message.
type ProjectionError struct {
	Seq     int64        `json:"seq"`
	Rule    session.Rule `json:"rule"`
	Message string       `json:"message"`
}

// Projection is the stored messages value of a session (the surface endpoint's reply):
// {"stateVersion","asOfSeq","log"?,"state","error"?}. AsOfSeq is the last applied seq (-1 before
// any); Log names the log it was folded from; Error is set when the projection is stopped.
type Projection struct {
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	Log          *LogPosition     `json:"log,omitempty"`
	State        State            `json:"state"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// LogPosition names the log a stored state was folded from: the session's incarnation ("" for a
// session created without one), the AGENTLOG stream seq of the last record folded, and Lost when
// the projector found that this log lost records it had folded before.
type LogPosition struct {
	Incarnation string    `json:"incarnation"`
	StreamSeq   uint64    `json:"streamSeq"`
	Lost        *DataLoss `json:"lost,omitempty"`
}

// DataLoss is what a session's log lost: the seqs FromSeq..ToSeq, which a state folded before held
// and the log no longer does (or holds other events at now; at least those seqs), the stream seq
// of the last record folded then (StreamSeq, 0 when unknown), what was found (Detail) and when
// (DetectedAt, Unix ms). It stays with the session's states until the session is removed.
type DataLoss struct {
	FromSeq    int64  `json:"fromSeq"`
	ToSeq      int64  `json:"toSeq"`
	StreamSeq  uint64 `json:"streamSeq,omitempty"`
	Detail     string `json:"detail"`
	DetectedAt int64  `json:"detectedAt"`
}

// UnitView is one unit's part of a snapshot: its stateVersion, asOfSeq (lower than the snapshot's
// for a stopped unit), view (JSON) and, for a stopped unit, its error.
type UnitView struct {
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	View         json.RawMessage  `json:"view"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// SnapshotReply is the reply of the snapshot endpoint: every registered unit's view of a session
// at one consistent asOfSeq (stopped units may stand lower, with their error).
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

// ForkRequest is a fork request: the source session, the boundary (the last source seq to copy,
// inclusive; nil = the source's last event) and the child id (empty = a fresh unique id).
//
// Then (edit-then-fork) lists events the child gets after its end-seed marker, in the same write
// as the seed, so that the child never exists without them: dsh event objects whose "seq" and
// "time" may be left out (the next seq, the fork's time), checked against the child's log with
// the log's rules before anything is written. A request with Then goes to ForkThenSubject
// (Client.Fork does that), so that a forker too old to know it answers "no responders" rather than
// fork without them.
type ForkRequest struct {
	Source   string            `json:"source"`
	Boundary *int64            `json:"boundary,omitempty"`
	Child    string            `json:"child,omitempty"`
	Then     []json.RawMessage `json:"then,omitempty"`
}

// ForkResult is a committed fork: the child id, the seed length (events copied, without the
// end-seed marker) and the parent session id; Then, for a request with Then, says where its
// events went. (A fork's error reply has no body, except {"child"} when the fork may have left
// part of its child behind: Error.Child.)
type ForkResult struct {
	Child         string      `json:"child"`
	SeedLength    int         `json:"seedLength"`
	ParentSession string      `json:"parentSession"`
	Then          *ThenResult `json:"then,omitempty"`
	// CwdDropped is the source's cwd when it was left out of the child's header: a cwd that
	// is not an absolute path, which dsh cannot restore (session.CwdRestorable).
	CwdDropped string `json:"cwdDropped,omitempty"`
}

// ThenResult is where a fork wrote its request's Then events: Events of them, seqs FirstSeq to
// LastSeq of the child.
type ThenResult struct {
	Events   int   `json:"events"`
	FirstSeq int64 `json:"firstSeq"`
	LastSeq  int64 `json:"lastSeq"`
}
