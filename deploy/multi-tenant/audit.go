package multitenant

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Outcome is what one attempt of the permission audit did.
type Outcome string

const (
	Refused     Outcome = "refused"             // the server refused the publish (a permission violation)
	Harmless    Outcome = "allowed-harmless"    // allowed; no other session's data, no service subject, changed
	Destructive Outcome = "allowed-destructive" // allowed; it changed another session's data or reached a service subject
)

// Finding is one attempt of the audit and its measured outcome.
type Finding struct {
	Role    Role    `json:"role"`
	Right   string  `json:"right"`   // the granted entry (RolePermissions)
	Attempt string  `json:"attempt"` // what was tried with it
	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason"` // what the server answered, or what changed
}

// Key names the attempt (role, right, attempt) in the accepted list.
func (f Finding) Key() string { return string(f.Role) + " " + f.Right + " " + f.Attempt }

// Accepted is a destructive outcome the audit accepts, and why.
type Accepted struct {
	Role           Role
	Right, Attempt string // Attempt "" accepts every attempt of the right; a Right ending in "*" every right it prefixes
	Reason         string
	// Remains puts the entry in SECURITY.md's "what remains possible within a tenant" list, with
	// this text (empty: a finding fixed elsewhere, not a lasting property).
	Remains string
}

// Accept is every destructive outcome of the audit that is accepted, with its reason.
// TestMultiTenant/audit fails on any other.
var Accept = []Accepted{
	{Agent, "agentlog.session.>", "", "one tenant trusts its agents: any of them may append to any session of the tenant (the guard fences concurrent writers, not agents); isolate agents by account",
		"an agent can append to any session of its tenant (a record without the guard makes the session unreadable: record-continue)"},
	{Agent, "agentlog.errors.>", "", "one tenant trusts its agents: an agent reports errors for any session it writes",
		"an agent can add an error report to any session of its tenant (`sessions --errored` lists it)"},
	{Agent, "agentlog.children.>", "", "one tenant trusts its agents: an agent creates forks, and their lineage links, of any session",
		"an agent can add a lineage link naming any session as a child (readers check each link against the child's metadata)"},
	{Agent, "$KV.agentlog_sessions.>", "", "one tenant trusts its agents: the KV create that claims an id is a publish on the key, which NATS cannot tell from a delete marker",
		"an agent can write any value over any session's metadata, or a delete marker: a forged header (another cwd, which dsh restores into; another parent or seedLength) is served as the session's until the operator repairs it, and a delete marker makes it read as not found (its records stay); the fix is metadata written once (the reply-injection fix below)"},
	{Agent, "$KV.agentlog_writers.>", "", "one tenant trusts its agents: Takeover takes any session's writer lease",
		"an agent can take or drop any session's writer lease (the fenced writer's next write fails; nothing stored is lost)"},
	{Forker, "agentlog.session.>", "", "the forker writes the seed of a child it creates: a JetStream publish on the child's subject, which NATS cannot tell from one on another session's",
		"the forker's credential can append to any session of its tenant, as an agent's can"},
	{Forker, "$KV.agentlog_sessions.>", "", "the forker creates the child's metadata and marks a child removed during its fork: publishes on the child's key",
		"the forker's credential can write any value over any session's metadata, or a delete marker, as an agent's can"},
	{Forker, "agentlog.children.>", "", "the forker writes the child's lineage link", "the forker's credential can add a lineage link, as an agent's can"},
	{Projector, "$KV.agentlog_projections.>", "", "the projector owns the projection states: it writes every session's, and `agentlog rebuild` writes them again from the log",
		"the projector's credential can overwrite or delete any session's projection state (`agentlog rebuild` restores them from the log)"},
	{Projector, "$KV.agentlog_projector_members.>", "", "the projector owns its members bucket: instances write their own leases, and a forged one only moves partitions",
		"the projector's credential can forge or drop a projector instance's lease (partitions move; no data changes)"},
	{Projector, "$JS.API.CONSUMER.*", "", "the projector pulls from, reads and unpins its own partition consumers (agentlog-projector-<p>, created by agentlog provision); it creates and deletes none",
		"the projector's credential can pull records from its partition consumers out of turn (the pinned instance's fold goes on; an unacked pull is redelivered)"},
	{Operator, ">", "", "the tenant's administrator: everything in its account, which is the isolation boundary", ""},
}

// replyInjectionReason accepts the reply-subject injection (the server's answer to a request
// published into the session subject the request names as its reply) for the roles of the
// tenant's account that may make an answered request: the agent and the forker, which may write
// any session's subject and metadata directly anyway, and the operator, which owns the account.
// NATS checks a request's subject, never its reply subject, against the requester's publish
// rights, and no server option changes that. The viewer and the projector live in accounts of
// their own (Permissions.OwnAccount): their replies land there, and one that lands in the tenant's
// account fails the audit.
const replyInjectionReason = "NATS does not check a request's reply subject against the requester's publish rights: the server's answer lands in the stream that captures the reply subject. " +
	"This role may write any session's subject and metadata directly (agent, forker) or owns the account (operator): the injection gives it no right it lacks"

// replyInjectionRemains is its entry of SECURITY.md's "what remains" list.
const replyInjectionRemains = "**Reply-subject injection, by the roles that write sessions.** A role of the tenant's account that may make an answered request (an agent's query or direct get, the forker's, any JetStream publish) can set the request's reply subject to a session's subject (`agentlog.session.<p>.<token>`) or to a session's metadata key (`$KV.agentlog_sessions.<token>`): NATS checks a request's subject against the publish rights, never its reply subject, and the server's answer is stored there (its reads then fail `record-header`, or its metadata does not decode). The audit measures it for every role (`reply-injection` rows). It gives the agent and the forker nothing they lack: both may publish on every session's subject and metadata key of their tenant (listed above). The viewer and the projector are out of it: each lives in an account of its own (`<T>_VIEW`, `<T>_PROJ`; no JetStream) that imports exactly what the role uses, so their replies are subjects of that account, where no stream captures them; the audit's rows for both are harmless, and the test fails on one that lands. So no read-only or projection credential can break a session's log or metadata."

// rollupAttempt is the attempt, on each direct publish right into a stream, of a publish with
// Nats-Rollup: all on a subject of the role's own: where the stream allows rollups it purges every
// other subject (one publish wipes a KV bucket). It is never accepted.
const rollupAttempt = "publish with Nats-Rollup: all on a subject of its own (purges every other subject of the stream)"

// accepted returns the reason f is accepted, or "". A rollup attempt never is. The reply-subject
// injection is accepted for the roles of the tenant's account, not for a role with an account of
// its own (the viewer, the projector): its replies live in its account, where no stream captures
// them, so one that lands fails the audit.
func accepted(f Finding) string {
	if f.Attempt == rollupAttempt {
		return ""
	}
	if strings.HasPrefix(f.Attempt, "reply-injection") {
		if p, err := RolePermissions(f.Role, 1); err == nil && p.OwnAccount {
			return ""
		}
		return replyInjectionReason
	}
	for _, a := range Accept {
		right := a.Right == f.Right || (strings.HasSuffix(a.Right, "*") && strings.HasPrefix(f.Right, strings.TrimSuffix(a.Right, "*")))
		if a.Role == f.Role && right && (a.Attempt == "" || a.Attempt == f.Attempt) {
			return a.Reason
		}
	}
	return ""
}

// Unaccepted returns the destructive findings the accepted list does not cover.
func Unaccepted(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Outcome == Destructive && accepted(f) == "" {
			out = append(out, f)
		}
	}
	return out
}

// The victims: another session's data in every stream and bucket, written by the operator before
// each attempt. The log victim has its own token: a fold of it (after an injection) writes its
// projections, not the projection victim's.
const (
	victimTok    = "auditv"
	victimLogTok = "auditvlog"
	victimDur    = "audit-victim"            // a durable pull consumer of another reader, on each stream
	serviceSink  = "agentlog.query.messages" // the query service's endpoint (queue group q)
)

// victimSubject is the subject of stream holding another session's data.
func victimSubject(stream string, partitions int) string {
	switch stream {
	case wire.StreamName:
		return wire.TokenSubject(victimLogTok, partitions)
	case wire.ErrorsStream:
		return wire.ErrorsPrefix + "." + victimTok
	case wire.ChildrenStream:
		return wire.ChildSubject(victimTok+"p", victimTok)
	case wire.ArchiveStream:
		return wire.ArchiveSubject(victimTok)
	case projectionsKV:
		return wire.KVSubject(wire.ProjectionsBucket, wire.ProjectionKey("messages", victimTok))
	case lifecycleKV:
		return wire.KVSubject(wire.LifecycleBucket, wire.HoldKey(victimTok))
	case blobsObj:
		return "$O." + wire.BlobsBucket + ".M." + victimTok
	case wire.BlobStream:
		return wire.BlobPrefix + "." + victimTok + "." + victimBlobID + ".0"
	}
	if b, ok := strings.CutPrefix(stream, "KV_"); ok {
		return wire.KVSubject(b, victimTok)
	}
	return ""
}

// streamOfSubject is the stream that captures a direct subject ("" for none).
func streamOfSubject(subject string) string {
	switch {
	case strings.HasPrefix(subject, wire.SubjectPrefix+"."):
		return wire.StreamName
	case strings.HasPrefix(subject, wire.ErrorsPrefix+"."):
		return wire.ErrorsStream
	case strings.HasPrefix(subject, wire.ChildrenPrefix+"."):
		return wire.ChildrenStream
	case strings.HasPrefix(subject, wire.BlobPrefix+"."):
		return wire.BlobStream
	case strings.HasPrefix(subject, "$KV."):
		b, _, _ := strings.Cut(strings.TrimPrefix(subject, "$KV."), ".")
		return "KV_" + b
	case strings.HasPrefix(subject, "$O."):
		b, _, _ := strings.Cut(strings.TrimPrefix(subject, "$O."), ".")
		return "OBJ_" + b
	}
	return ""
}

// victimStreams are the streams whose victim subject every attempt is checked against (the legacy
// Object Store bucket agentlog_blobs is not created any more: its rights are direct-get reads).
var victimStreams = []string{wire.StreamName, wire.ErrorsStream, wire.ChildrenStream, wire.ArchiveStream,
	sessionsKV, projectionsKV, writersKV, lifecycleKV, wire.BlobStream}

// victimBlobID is the blob id of the victim's chunk in AGENTLOG_BLOBS.
const victimBlobID = "a0d17a0d17a0d17a0d17a0d17a0d17a0"

// attempt is one try of a right.
type attempt struct {
	right, name string
	subject     string
	header      nats.Header
	body        func(a *Auditor) []byte
	reply       string // "": the attempt's own inbox (its answer is waited for)
	sink        string // a service subject whose deliveries make the attempt destructive
	consumer    string // a consumer the attempt creates (on stream), deleted after it
	stream      string
	last        bool   // run after every other attempt (it disturbs the deployment's services)
	deferred    bool   // the same, for an attempt on the projector's own consumers
	noAnswer    bool   // nothing answers it: not waited for
	interest    string // a subject the operator subscribes to during the attempt (a live reader's interest)
	// verdict, when set, judges an allowed attempt by its answer (an effect the victims' state
	// cannot show for sure: the projector re-creates a consumer it lost at once).
	verdict func(answer string) (Outcome, string)
	note    string
}

// entryStream splits a $JS.API entry into its operation and stream: "STREAM.PURGE", "AGENTLOG".
func entryStream(subject string) (op, stream string) {
	rest := strings.TrimPrefix(subject, "$JS.API.")
	for _, o := range []string{"STREAM.PURGE", "STREAM.MSG.DELETE", "STREAM.MSG.GET", "STREAM.INFO", "STREAM.CREATE", "STREAM.DELETE",
		"CONSUMER.CREATE", "CONSUMER.DELETE", "CONSUMER.MSG.NEXT", "CONSUMER.INFO", "CONSUMER.UNPIN", "DIRECT.GET"} {
		if s, ok := strings.CutPrefix(rest, o+"."); ok {
			s = strings.TrimSuffix(strings.TrimSuffix(s, ".>"), ".*")
			return o, s
		}
	}
	return rest, ""
}

func jsonBody(v any) func(*Auditor) []byte {
	return func(*Auditor) []byte { b, _ := json.Marshal(v); return b }
}

// attempts lists what the audit tries with each publish right of role: for every right whose
// request takes a subject, filter or deliver target in its payload, that target pointed at another
// session's data, a service subject, the whole stream; for every direct subject, a publish on
// another session's subject; and for the first answered request of each kind, the reply-subject
// injection.
func attempts(role Role, partitions int) ([]attempt, error) {
	p, err := RolePermissions(role, partitions)
	if err != nil {
		return nil, err
	}
	victimLog := wire.TokenSubject(victimLogTok, partitions)
	var out []attempt
	injected := map[string]bool{}
	inject := func(right, kind, subject string, body func(*Auditor) []byte, h nats.Header) {
		if injected[kind] {
			return
		}
		injected[kind] = true
		out = append(out,
			attempt{right: right, name: "reply-injection: answer into another session's log", subject: subject, body: body, header: h, reply: victimLog},
			attempt{right: right, name: "reply-injection: answer into another session's metadata", subject: subject, body: body, header: h, reply: victimSubject(sessionsKV, partitions)})
	}
	for _, e := range p.Publish {
		s := e.Subject
		switch {
		case s == ">":
			out = append(out,
				attempt{right: s, name: "purge another session's records", subject: "$JS.API.STREAM.PURGE." + wire.StreamName, body: jsonBody(map[string]any{"filter": victimLog})})
			inject(s, "operator", "$JS.API.STREAM.INFO."+wire.StreamName, nil, nil)
		case strings.HasPrefix(s, "$JS.API."):
			op, stream := entryStream(s)
			vs := victimSubject(stream, partitions)
			switch op {
			case "STREAM.PURGE":
				out = append(out,
					attempt{right: s, name: "purge another session's subject", subject: s, body: jsonBody(map[string]any{"filter": vs})},
					attempt{right: s, name: "purge the whole stream", subject: s, body: jsonBody(map[string]any{})})
			case "CONSUMER.CREATE":
				if !strings.HasSuffix(s, ".>") {
					break
				}
				name := "audit-" + string(role)
				subj := "$JS.API.CONSUMER.CREATE." + stream + "." + name
				out = append(out,
					attempt{right: s, name: "push consumer delivering the whole stream into another session's log (a live viewer subscribed)", subject: subj, consumer: name, stream: stream, interest: victimLog,
						body: jsonBody(map[string]any{"stream_name": stream, "config": map[string]any{"name": name, "deliver_subject": victimLog, "ack_policy": "none", "inactive_threshold": int64(time.Minute)}})},
					attempt{right: s, name: "push consumer delivering into a service's queue group", subject: subj, consumer: name, stream: stream, sink: serviceSink,
						body: jsonBody(map[string]any{"stream_name": stream, "config": map[string]any{"name": name, "deliver_subject": serviceSink, "deliver_group": "q", "ack_policy": "none", "inactive_threshold": int64(time.Minute)}})},
					attempt{right: s, name: "durable consumer left behind", subject: subj, consumer: name, stream: stream,
						body: jsonBody(map[string]any{"stream_name": stream, "config": map[string]any{"durable_name": name, "ack_policy": "explicit"}})})
				if stream == wire.StreamName && role != Projector {
					pc := wire.StreamName + "." + "agentlog-projector-0"
					out = append(out, attempt{right: s, name: "update the projector's partition consumer", subject: "$JS.API.CONSUMER.CREATE." + pc, verdict: succeeded("the projector's partition consumer agentlog-projector-0 now has another filter"), deferred: true,
						body: jsonBody(map[string]any{"stream_name": stream, "config": map[string]any{"durable_name": "agentlog-projector-0", "filter_subject": victimLog, "ack_policy": "explicit"}})})
				}
				inject(s, op, subj, jsonBody(map[string]any{"stream_name": stream, "config": map[string]any{"name": name, "ack_policy": "none", "inactive_threshold": int64(time.Minute)}}), nil)
			case "CONSUMER.DELETE":
				out = append(out, attempt{right: s, name: "delete another reader's consumer", subject: "$JS.API.CONSUMER.DELETE." + stream + "." + victimDur, stream: stream, verdict: succeeded("deleted " + victimDur)})
				if stream == wire.StreamName && role != Projector {
					out = append(out, attempt{right: s, name: "delete the projector's partition consumer", subject: "$JS.API.CONSUMER.DELETE." + stream + ".agentlog-projector-0", verdict: succeeded("deleted agentlog-projector-0 (the projector creates it again)"), deferred: true})
				}
			case "CONSUMER.MSG.NEXT":
				subj := "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + victimDur
				out = append(out, attempt{right: s, name: "pull from another reader's consumer", subject: subj, stream: stream, body: jsonBody(map[string]any{"batch": 1, "no_wait": true})})
				if stream == wire.StreamName && len(p.DenyPublish) > 0 { // else timing-dependent: whether a record is pending
					out = append(out, attempt{right: s, name: "pull from the projector's partition consumer", subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + ".agentlog-projector-0", body: jsonBody(map[string]any{"batch": 1, "no_wait": true})},
						attempt{right: s, name: "pull from the projector's partition consumer, in its priority group", subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + ".agentlog-projector-0",
							body: jsonBody(map[string]any{"batch": 1, "expires": int64(time.Second), "group": projector.PriorityGroup}), verdict: delivered})
				}
				out = append(out, attempt{right: s, name: "reply-injection: pulled records into another session's log", subject: subj, stream: stream, body: jsonBody(map[string]any{"batch": 1, "expires": int64(time.Second)}), reply: victimLog})
			case "DIRECT.GET":
				if strings.HasSuffix(s, ".>") {
					subj := "$JS.API.DIRECT.GET." + stream + "." + vs
					out = append(out, attempt{right: s, name: "read another session's last message (subject in the request's subject)", subject: subj})
					inject(s, "DIRECT.GET.subject", subj, nil, nil)
				} else {
					out = append(out, attempt{right: s, name: "batch read of the whole stream (filter in the payload)", subject: s, body: jsonBody(map[string]any{"multi_last": []string{">"}, "batch": 10})})
					inject(s, "DIRECT.GET.batch", s, jsonBody(map[string]any{"multi_last": []string{">"}, "batch": 1}), nil)
				}
			case "STREAM.MSG.GET":
				out = append(out, attempt{right: s, name: "read another session's last message (subject in the payload)", subject: s, body: jsonBody(map[string]any{"last_by_subj": vs})})
				inject(s, op, s, jsonBody(map[string]any{"last_by_subj": vs}), nil)
			case "STREAM.DELETE":
				out = append(out, attempt{right: s, name: "delete the bucket and create it capturing a service subject", subject: s, stream: stream, last: true})
			case "STREAM.CREATE":
				out = append(out, attempt{right: s, name: "create the bucket capturing a service subject (while it exists)", subject: s, stream: stream,
					body: jsonBody(map[string]any{"name": stream, "subjects": []string{"$KV." + strings.TrimPrefix(stream, "KV_") + ".>", serviceSink}, "storage": "memory"})})
			case "STREAM.MSG.DELETE":
				out = append(out, attempt{right: s, name: "delete another session's last message", subject: s, body: func(a *Auditor) []byte {
					seq := a.lastSeq(stream, vs)
					b, _ := json.Marshal(map[string]any{"seq": seq, "no_erase": true})
					return b
				}})
			case "STREAM.INFO", "CONSUMER.INFO", "CONSUMER.UNPIN", "INFO": // no target in the payload
				inject(s, "info", s, nil, nil)
			default:
				return nil, fmt.Errorf("audit: role %s has right %s, a request the audit has no attack for: add one to attempts", role, s)
			}
		case strings.HasPrefix(s, "$JS.FC.") || strings.HasPrefix(s, "$JS.ACK."):
			// Flow control and acks: the target is in the subject, which names the consumer.
			out = append(out, attempt{right: s, name: "publish on another reader's consumer's subject", subject: strings.TrimSuffix(s, ">") + victimDur + ".1.1.1.0.0", noAnswer: true})
		case s == "agentlog.fork" || s == "agentlog.fork.then":
			out = append(out, attempt{right: s, name: "fork another session (named in the payload)", subject: s, body: jsonBody(map[string]any{"source": victimLogTok, "child": "audit-child-" + string(role)})})
			inject(s, "service", s, jsonBody(map[string]any{"source": victimLogTok, "child": "audit-child-" + string(role)}), nil)
		case strings.HasPrefix(s, "agentlog.query."):
			out = append(out, attempt{right: s, name: "query another session (named in the payload)", subject: "agentlog.query.messages", body: jsonBody(map[string]any{"session": victimLogTok})})
			inject(s, "service", "agentlog.query.messages", jsonBody(map[string]any{"session": victimLogTok}), nil)
		default:
			st := streamOfSubject(s)
			if st == "" {
				break
			}
			vs := victimSubject(st, partitions)
			if !subjectMatches(s, vs) {
				// A narrower grant ($O.<bucket>.M.>): its own form of the victim.
				vs = strings.TrimSuffix(s, ">") + victimTok
			}
			h := nats.Header{}
			if strings.HasPrefix(s, "$KV.") {
				h.Set("KV-Operation", "DEL")
			}
			note := ""
			if !slicesContain(victimStreams, st) {
				note = " (" + st + " holds no session's data: the projector's instance leases)"
			}
			out = append(out, attempt{right: s, name: "publish on another session's subject", subject: vs, header: h, body: jsonBody(map[string]any{"audit": "forged"}), note: note})
			// A publish on a subject of the role's own (not the victim's) with Nats-Rollup: all
			// purges every other subject of a stream that allows rollups: never accepted.
			if own := vs + "rollup"; subjectMatches(s, own) {
				out = append(out, attempt{right: s, name: rollupAttempt, subject: own, header: nats.Header{"Nats-Rollup": []string{"all"}}, body: jsonBody(map[string]any{"audit": "rollup"}), note: note})
			}
			inject(s, "jetstream-publish", "$JS.API.STREAM.INFO."+st, nil, nil)
		}
	}
	return out, nil
}

// subjectMatches reports whether literal subject s matches pattern p (NATS wildcards).
func subjectMatches(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, t := range pt {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}

// Auditor runs the audit against a running deployment's tenant.
type Auditor struct {
	// Dial connects as role of the audited tenant.
	Dial func(role Role) (*nats.Conn, error)
	// Op is a connection as the tenant's operator: it writes the victims and checks them.
	Op         *nats.Conn
	Partitions int
	// Domains are the JetStream domains of the roles with an account of their own
	// (Permissions.OwnAccount, Identity.Domain): their attempts' $JS.API subjects go under it.
	Domains map[Role]string
	// Wait bounds the wait for an effect that comes after the answer (deliveries, a stored
	// reply): an allowed attempt whose effect has not shown by then is harmless.
	Wait time.Duration

	js natsjs.JetStream
}

type subjState struct{ msgs, last uint64 }

// Run tries every attempt of every role and returns the findings, in role order.
func (a *Auditor) Run(ctx context.Context) ([]Finding, error) {
	a.js, _ = natsjs.New(a.Op)
	if a.Wait == 0 {
		a.Wait = time.Second
	}
	var all []Finding
	var deferred []roleAttempt
	for _, r := range Roles {
		ats, err := attempts(r, a.Partitions)
		if err != nil {
			return nil, err
		}
		for _, at := range ats {
			if at.last || at.deferred {
				continue
			}
			f, err := a.try(ctx, r, at)
			if err != nil {
				return nil, err
			}
			all = append(all, f)
		}
		for _, at := range ats {
			if at.last || at.deferred {
				deferred = append(deferred, roleAttempt{r, at})
			}
		}
		// Subscribe rights: a subscription reads, and the role reads its tenant anyway.
		p, _ := RolePermissions(r, a.Partitions)
		for _, e := range p.Subscribe {
			all = append(all, Finding{Role: r, Right: "subscribe " + e.Subject, Attempt: "subscribe", Outcome: Harmless, Reason: "a subscription only reads (every role reads its tenant); not tried"})
		}
	}
	// Last, for every role: what disturbs the projector (its consumers, its members bucket).
	for _, ra := range deferred {
		f, err := a.try(ctx, ra.role, ra.at)
		if err != nil {
			return nil, err
		}
		all = append(all, f)
	}
	return all, nil
}

type roleAttempt struct {
	role Role
	at   attempt
}

// seed writes the victims that are missing (an earlier destructive attempt removed them) and the
// victim consumers, and returns the victims' state.
func (a *Auditor) seed(ctx context.Context) (map[string]subjState, error) {
	for _, st := range victimStreams {
		s := victimSubject(st, a.Partitions)
		stt, err := a.subject(ctx, st, s)
		if err != nil {
			return nil, err
		}
		if stt.msgs == 0 {
			if _, err := a.js.Publish(ctx, s, []byte(`{"audit":"victim"}`)); err != nil {
				return nil, fmt.Errorf("audit: seed %s in %s: %w", s, st, err)
			}
		}
		if st == membersKV {
			continue
		}
		// Fresh for every attempt: every victim message pending, none delivered.
		_ = a.js.DeleteConsumer(ctx, st, victimDur)
		if _, err := a.js.CreateConsumer(ctx, st, natsjs.ConsumerConfig{Durable: victimDur, FilterSubject: s, AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
			return nil, fmt.Errorf("audit: seed consumer %s on %s: %w", victimDur, st, err)
		}
	}
	return a.state(ctx)
}

func (a *Auditor) subject(ctx context.Context, stream, subject string) (subjState, error) {
	s, err := a.js.Stream(ctx, stream)
	if err != nil {
		return subjState{}, fmt.Errorf("audit: stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, natsjs.WithSubjectFilter(subject))
	if err != nil {
		return subjState{}, fmt.Errorf("audit: stream %s: %w", stream, err)
	}
	out := subjState{msgs: info.State.Subjects[subject]}
	if out.msgs > 0 {
		m, err := s.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return subjState{}, err
		}
		out.last = m.Sequence
	}
	return out, nil
}

// state is the victims' state: each victim subject's count and last seq, each victim consumer's
// delivered seq (or its absence), the projector's partition consumer 0.
func (a *Auditor) state(ctx context.Context) (map[string]subjState, error) {
	out := map[string]subjState{}
	for _, st := range victimStreams {
		s := victimSubject(st, a.Partitions)
		v, err := a.subject(ctx, st, s)
		if err != nil {
			return nil, err
		}
		out[st+" "+s] = v
		if st == membersKV {
			continue
		}
		c, err := a.js.Consumer(ctx, st, victimDur)
		if err != nil {
			out["consumer "+st] = subjState{}
			continue
		}
		ci := c.CachedInfo()
		out["consumer "+st] = subjState{msgs: 1, last: ci.Delivered.Stream}
	}
	return out, nil
}

// delivered judges a pull by its answer: a message (not a status) was taken from the consumer.
func delivered(answer string) (Outcome, string) {
	if answer == "" || answer == "(no answer)" || strings.HasPrefix(answer, "status ") {
		return Harmless, "nothing delivered: " + trim(answer)
	}
	return Destructive, "a record was delivered to it: " + trim(answer)
}

// succeeded judges an attempt by its JetStream answer: no error is what destroyed.
func succeeded(what string) func(string) (Outcome, string) {
	return func(answer string) (Outcome, string) {
		if answer == "" || answer == "(no answer)" || strings.Contains(answer, `"error"`) {
			return Harmless, "refused by JetStream or not answered: " + trim(answer)
		}
		return Destructive, what
	}
}

// lastSeq is the stream seq of subject's last message in stream (0: none).
func (a *Auditor) lastSeq(stream, subject string) uint64 {
	st, err := a.subject(context.Background(), stream, subject)
	if err != nil {
		return 0
	}
	return st.last
}

// changed names what differs between two states.
func changed(before, after map[string]subjState) []string {
	var out []string
	for k, b := range before {
		if after[k] != b {
			out = append(out, fmt.Sprintf("%s: %d msgs, last %d -> %d msgs, last %d", k, b.msgs, b.last, after[k].msgs, after[k].last))
		}
	}
	sort.Strings(out)
	return out
}

// try runs one attempt as role and measures its outcome.
func (a *Auditor) try(ctx context.Context, role Role, at attempt) (Finding, error) {
	f := Finding{Role: role, Right: at.right, Attempt: at.name}
	before, err := a.seed(ctx)
	if err != nil {
		return f, err
	}
	defer a.cleanup(ctx, role, at)
	var sink *nats.Subscription
	if at.sink != "" {
		if sink, err = a.Op.SubscribeSync(at.sink); err != nil {
			return f, err
		}
		defer sink.Unsubscribe()
		a.Op.Flush()
	}
	if at.interest != "" {
		isub, err := a.Op.SubscribeSync(at.interest)
		if err != nil {
			return f, err
		}
		defer isub.Unsubscribe()
		a.Op.Flush()
	}
	var original *natsjs.StreamConfig
	if at.last { // STREAM.DELETE: keep the bucket's config to restore it
		s, err := a.js.Stream(ctx, at.stream)
		if err != nil {
			return f, err
		}
		cfg := s.CachedInfo().Config
		original = &cfg
	}
	nc, err := a.Dial(role)
	if err != nil {
		return f, fmt.Errorf("audit: connect as %s: %w", role, err)
	}
	defer nc.Close()
	perms, _ := RolePermissions(role, a.Partitions)
	if perms.OwnAccount {
		at.subject = perms.InAccount(at.subject, a.Domains[role])
	}
	// A reply injection of a role with an account of its own: the role watches its own
	// account's reply subject, to see where the answer lands.
	var landed *nats.Subscription
	if perms.OwnAccount && at.reply != "" {
		if landed, err = nc.SubscribeSync(at.reply); err != nil {
			return f, err
		}
		if err := nc.Flush(); err != nil {
			return f, err
		}
	}
	answer, refused, err := send(ctx, nc, at, a)
	if err != nil {
		return f, err
	}
	if refused != "" {
		f.Outcome, f.Reason = Refused, refused
		return f, nil
	}
	if at.last && answer != "" && !strings.Contains(answer, `"error"`) {
		// Deleted: create it again capturing a service subject, as the role.
		body, _ := json.Marshal(map[string]any{"name": at.stream, "subjects": []string{"$KV." + strings.TrimPrefix(at.stream, "KV_") + ".>", serviceSink}, "storage": "memory"})
		cat := attempt{subject: "$JS.API.STREAM.CREATE." + at.stream, body: func(*Auditor) []byte { return body }}
		answer2, refused2, err := send(ctx, nc, cat, a)
		if err != nil {
			return f, err
		}
		s, _ := a.js.Stream(ctx, at.stream)
		if err := a.js.DeleteStream(ctx, at.stream); err != nil && s != nil {
			return f, err
		}
		if _, err := a.js.CreateStream(ctx, *original); err != nil {
			return f, fmt.Errorf("audit: restore %s: %w", at.stream, err)
		}
		if refused2 == "" && s != nil && slicesContain(s.CachedInfo().Config.Subjects, serviceSink) {
			f.Outcome, f.Reason = Destructive, "deleted, then created capturing "+serviceSink+": "+trim(answer2)
			return f, nil
		}
		f.Outcome, f.Reason = Destructive, "deleted the bucket: "+trim(answer)
		return f, nil
	}
	if at.verdict != nil {
		f.Outcome, f.Reason = at.verdict(answer)
		return f, nil
	}
	// The effect: at once for an answered attempt; within Wait for deliveries and stored replies.
	deadline := time.Now().Add(a.Wait)
	for {
		after, err := a.state(ctx)
		if err != nil {
			return f, err
		}
		if d := changed(before, after); len(d) > 0 {
			f.Outcome, f.Reason = Destructive, strings.Join(d, "; ")
			return f, nil
		}
		if sink != nil {
			if m, err := sink.NextMsg(10 * time.Millisecond); err == nil {
				f.Outcome, f.Reason = Destructive, fmt.Sprintf("a delivery reached %s (%d bytes)", at.sink, len(m.Data))
				return f, nil
			}
		}
		if ((answer != "" || at.noAnswer) && at.reply == "" && at.sink == "" && at.consumer == "") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Outcome = Harmless
	switch {
	case landed != nil:
		if m, err := landed.NextMsg(a.Wait); err == nil {
			f.Reason = fmt.Sprintf("the answer (%d bytes) landed in the %s's own account, on %s there, where no stream captures it; nothing of another session changed", len(m.Data), role, at.reply)
		} else {
			f.Reason = "no answer reached the " + string(role) + "'s own account, and nothing of another session changed"
		}
	case strings.Contains(at.name, "left behind") && !strings.Contains(answer, `"error"`):
		f.Reason = "a durable consumer stays until deleted (the account's max_consumers bounds them); nothing of another session changed"
	case answer != "":
		f.Reason = "answered, nothing of another session changed: " + trim(answer)
	default:
		f.Reason = "nothing of another session changed"
	}
	f.Reason += at.note
	return f, nil
}

func slicesContain(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// cleanup deletes what an attempt created: its consumer, a fork child.
func (a *Auditor) cleanup(ctx context.Context, role Role, at attempt) {
	if at.consumer != "" {
		a.js.DeleteConsumer(ctx, at.stream, at.consumer)
	}
}

// send publishes the attempt as nc and returns the answer (when it replies to its own inbox) or
// the permission violation: the server writes a denied publish's -ERR before the PONG of the flush
// that follows it, so a refusal is known after one round trip.
func send(ctx context.Context, nc *nats.Conn, at attempt, a *Auditor) (answer, refused string, err error) {
	m := &nats.Msg{Subject: at.subject, Header: at.header}
	if at.body != nil {
		m.Data = at.body(a)
	}
	var sub *nats.Subscription
	switch {
	case at.noAnswer:
	case at.reply != "":
		m.Reply = at.reply
	default:
		m.Reply = nc.NewInbox()
		if sub, err = nc.SubscribeSync(m.Reply); err != nil {
			return "", "", err
		}
		defer sub.Unsubscribe()
	}
	if err := nc.PublishMsg(m); err != nil {
		return "", "", err
	}
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		return "", "", err
	}
	if le := nc.LastError(); le != nil && strings.Contains(le.Error(), "Violation") {
		return "", le.Error(), nil
	}
	if sub == nil {
		return "", "", nil
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := sub.NextMsgWithContext(wctx)
	if err != nil {
		return "(no answer)", "", nil
	}
	if st := r.Header.Get("Status"); st != "" {
		return "status " + st + " " + r.Header.Get("Description"), "", nil
	}
	return string(r.Data), "", nil
}

func trim(s string) string {
	if len(s) > 160 {
		return s[:160] + "..."
	}
	return s
}

// RoleTable renders role's permissions as SECURITY.md lists them: one row per entry, the
// projector's partition consumers written once with <p>.
func RoleTable(role Role) (string, error) {
	p, err := RolePermissions(role, 1)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| right | subject | why |\n|---|---|---|\n")
	rows := func(kind string, es []Entry) {
		for _, e := range es {
			subj := strings.ReplaceAll(e.Subject, "agentlog-projector-0", "agentlog-projector-<p>")
			fmt.Fprintf(&b, "| %s | `%s` | %s |\n", kind, subj, e.Why)
		}
	}
	if p.OwnAccount {
		// Its account imports these from the tenant's; its user is allowed the same (a second
		// fence), the $JS.API subjects and KV puts under its domain: $JS.<domain>.API.<rest>.
		rows("service import (publish)", p.Publish)
		rows("deny publish", p.DenyPublish)
		for _, x := range p.Subscribe {
			kind := "stream import (subscribe)"
			switch {
			case x.Subject == inbox.Subject:
				kind = "subscribe (its own account's inboxes)"
			case slices.Contains(p.Serves, x.Subject):
				kind = "service export (serves)"
			case x.Subject == srvDiscovery.Subject:
				kind = "subscribe (its own account only)"
			}
			rows(kind, []Entry{x})
		}
		rows("deny subscribe", p.DenySubscribe)
	} else {
		rows("publish", p.Publish)
		rows("deny publish", p.DenyPublish)
		rows("subscribe", p.Subscribe)
		rows("deny subscribe", p.DenySubscribe)
	}
	if p.AllowResponses {
		b.WriteString("| allow_responses | (reply subjects of requests it received) | answers requests: one reply each, within 2 minutes |\n")
	}
	return b.String(), nil
}

// RemainsList renders SECURITY.md's list of what remains possible within a tenant: every
// accepted destructive finding with a lasting reason, and the reply-subject injection.
func RemainsList() string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, a := range Accept {
		if a.Remains == "" || seen[a.Remains] {
			continue
		}
		seen[a.Remains] = true
		fmt.Fprintf(&b, "- %s (`%s`, role %s).\n", a.Remains, strings.TrimSuffix(a.Right, "*"), a.Role)
	}
	b.WriteString("- " + replyInjectionRemains + "\n")
	return b.String()
}

// AuditSummary renders the audit's counts per role and outcome, and its destructive findings with
// the reason each is accepted.
func AuditSummary(fs []Finding) string {
	var b strings.Builder
	count := map[Role]map[Outcome]int{}
	for _, f := range fs {
		if count[f.Role] == nil {
			count[f.Role] = map[Outcome]int{}
		}
		count[f.Role][f.Outcome]++
	}
	b.WriteString("| role | attempts | refused | allowed-harmless | allowed-destructive (all accepted) |\n|---|---|---|---|---|\n")
	var tr, th, td int
	for _, r := range Roles {
		c := count[r]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d |\n", r, c[Refused]+c[Harmless]+c[Destructive], c[Refused], c[Harmless], c[Destructive])
		tr, th, td = tr+c[Refused], th+c[Harmless], td+c[Destructive]
	}
	fmt.Fprintf(&b, "| all | %d | %d | %d | %d |\n\n", tr+th+td, tr, th, td)
	b.WriteString("| role | right | attempt | accepted because |\n|---|---|---|---|\n")
	for _, f := range fs {
		if f.Outcome != Destructive {
			continue
		}
		reason := accepted(f)
		if strings.HasPrefix(f.Attempt, "reply-injection") {
			reason = "reply-subject injection (below)"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", f.Role, f.Right, f.Attempt, mdCell(reason))
	}
	return b.String()
}

// AuditTable renders every finding: role, right, attempt, outcome, reason.
func AuditTable(fs []Finding) string {
	var b strings.Builder
	b.WriteString("| role | right | attempt | outcome | reason |\n|---|---|---|---|---|\n")
	for _, f := range fs {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", f.Role, f.Right, f.Attempt, f.Outcome, mdCell(f.Reason))
	}
	return b.String()
}

// mdCell makes s one table cell: no newlines or pipes, and the parts that differ between runs
// (stream sequences, timestamps, ids) left out so that the generated text is stable.
func mdCell(s string) string {
	s = strings.NewReplacer("\n", " ", "|", "\\|").Replace(s)
	return volatile.ReplaceAllString(s, "N")
}

var volatile = regexp.MustCompile(`\b\d+\b|"(created|ts|time|timestamp|nonce|server_id|name|domain|cluster|leader|first_ts|last_ts|config)"\s*:\s*"[^"]*"|[A-Za-z0-9]{22}`)

// ReplaceSection replaces the text between the markers of section name in doc:
// "<!-- BEGIN generated:name -->" and "<!-- END generated:name -->".
func ReplaceSection(doc, name, content string) (string, error) {
	begin, end := "<!-- BEGIN generated:"+name+" -->\n", "<!-- END generated:"+name+" -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no section %q (markers %q ... %q)", name, strings.TrimSpace(begin), end)
	}
	return doc[:i+len(begin)] + content + doc[j:], nil
}

// ServerConf renders p as a nats-server permissions block (what the generated config holds), for
// tests that run a server with one role's permissions.
func (p Permissions) ServerConf(indent string) string { return p.conf(indent) }
