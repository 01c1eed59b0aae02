package multitenant

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/wire"
)

// Role is one of the identities of a tenant. Its permissions apply inside the tenant's own NATS
// account (the viewer's in an account of its own that imports them: Permissions.OwnAccount); what
// is outside the account (other tenants) no permission can reach.
type Role string

const (
	Agent     Role = "agent"     // an AI agent: the publisher, the client package, the CLI's session commands
	Projector Role = "projector" // `agentlog projector`: the fold and the query service
	Forker    Role = "forker"    // `agentlog forker`: the fork service
	Operator  Role = "operator"  // the tenant's administrator: provision, rm, rebuild, everything in the account
	Viewer    Role = "viewer"    // read-only: the web inspector, `sessions`, `status`, `events`, `messages`
)

// Roles lists every role, in the order the configuration writes them.
var Roles = []Role{Agent, Projector, Forker, Operator, Viewer}

// Permissions are a role's NATS permissions: subjects it may publish to and subscribe to, and those
// denied although a wider allow would match them. AllowResponses lets a service answer requests on
// their reply subjects (and only those) without a publish right on the requesters' inboxes.
type Permissions struct {
	Publish, Subscribe         []Entry
	DenyPublish, DenySubscribe []Entry
	AllowResponses             bool
	// OwnAccount: the role's user lives in an account of its own (ViewerAccount: no JetStream, no
	// stream) that reaches the tenant's account only through imports, which the tenant's account
	// exports to it alone. Every Publish entry is a service import ($JS.API.<rest> imported as
	// $JS.<ViewerDomain>.API.<rest>: the role's clients use that JetStream domain), every Subscribe
	// entry but the inbox a stream import. A request's reply subject then lives in the role's own
	// account: an answer sent to agentlog.session.<p>.<token> lands where no stream captures it.
	// The user's permissions there are the same entries (the $JS.API ones under the prefix): a
	// second fence.
	OwnAccount bool
	// Serves are the request subjects a role with an account of its own answers (a subset of
	// Subscribe): its account exports them to the tenant's account and to the other roles' own
	// accounts, which import them, so that a requester's reply is the server's response subject.
	Serves []string
}

// ownAccounts are the roles with an account of their own (Permissions.OwnAccount): the suffixes
// of their account's name (tenant names have no '_') and of their JetStream domain.
var ownAccounts = map[Role]struct{ account, domain string }{
	Viewer:    {"_VIEW", "view"},
	Projector: {"_PROJ", "proj"},
}

// RoleAccount is the name of the account of role in tenant: the tenant's own (its name), or for a
// role with an account of its own <tenant>_VIEW or <tenant>_PROJ.
func RoleAccount(tenant string, role Role) string {
	return tenant + ownAccounts[role].account
}

// RoleDomain is the JetStream domain (API prefix $JS.<domain>.API.) under which the account of a
// role with an account of its own imports the tenant's JetStream API: <tenant>view, <tenant>proj
// ("" for the other roles).
func RoleDomain(tenant string, role Role) string {
	if o, ok := ownAccounts[role]; ok {
		return tenant + o.domain
	}
	return ""
}

// ViewerAccount is the name of tenant's viewer account.
func ViewerAccount(tenant string) string { return RoleAccount(tenant, Viewer) }

// ViewerDomain is the JetStream domain of tenant's viewer account.
func ViewerDomain(tenant string) string { return RoleDomain(tenant, Viewer) }

// InAccount is subject as a user of the role's account publishes it: when the role has an account
// of its own (OwnAccount), a $JS.API subject under domain's prefix, and a KV put ($KV.<bucket>.>)
// there too (nats.go's KV puts through a JetStream context with a domain go to
// $JS.<domain>.API.$KV.<bucket>.<key>); else subject.
func (p Permissions) InAccount(subject, domain string) string {
	if !p.OwnAccount {
		return subject
	}
	if rest, ok := strings.CutPrefix(subject, "$JS.API."); ok {
		return "$JS." + domain + ".API." + rest
	}
	if strings.HasPrefix(subject, "$KV.") {
		return "$JS." + domain + ".API." + subject
	}
	return subject
}

// StreamResponses reports whether the service export of a request subject answers with several
// messages (response_type stream): a batched direct get ($JS.API.DIRECT.GET.<stream>, the filter
// in the payload) answers with each message and an end-of-batch status.
func StreamResponses(subject string) bool {
	if strings.HasPrefix(subject, "$JS.API.CONSUMER.MSG.NEXT.") {
		return true // a pull request: its batch of messages, heartbeats and status
	}
	rest, ok := strings.CutPrefix(subject, "$JS.API.DIRECT.GET.")
	return ok && !strings.Contains(rest, ".")
}

// Entry is one subject of a permission list and why it is there (SECURITY.md has the same table).
type Entry struct{ Subject, Why string }

const (
	sessionsKV    = "KV_" + wire.SessionsBucket
	projectionsKV = "KV_" + wire.ProjectionsBucket
	writersKV     = "KV_" + wire.WritersBucket
	membersKV     = "KV_" + projector.MembersBucket
	blobsObj      = "OBJ_" + wire.BlobsBucket
	lifecycleKV   = "KV_" + wire.LifecycleBucket
)

func e(subject, why string) Entry { return Entry{subject, why} }

// api is an entry for $JS.API.<rest>.
func api(rest, why string) Entry { return Entry{"$JS.API." + rest, why} }

// Entries every role that attaches to the store (store.Open) needs: it checks every stream and
// bucket, and reads replies on its inbox.
func openEntries() []Entry {
	var out []Entry
	for _, s := range []string{wire.StreamName, wire.ErrorsStream, sessionsKV, projectionsKV, writersKV, wire.BlobStream, wire.ArchiveStream, wire.ChildrenStream, lifecycleKV} {
		out = append(out, api("STREAM.INFO."+s, "store.Open checks the stream's or bucket's settings"))
	}
	return out
}

// Entries of the reads of AGENTLOG that the publisher, the client and the services share.
var (
	tailGet   = api("DIRECT.GET.AGENTLOG.>", "the last record of a session (Session.Tail: the next append's guard; `sessions` rows): direct get, last by subject")
	leaderGet = api("STREAM.MSG.GET.AGENTLOG", "reads from the stream leader (Session.TailFromLeader, a record by stream seq, the next by subject): never stale")
	metaGet   = api("STREAM.MSG.GET."+sessionsKV, "session metadata from the leader (Session.Info, CheckCurrent)")
	// A session's log is read with batched direct gets on the stream (the session's subject is in
	// the payload, next_by_subj): no reader creates a consumer, so none can make the server deliver
	// records into a subject of its choosing (a push consumer's deliver_subject) or leave durables.
	logRead = api("DIRECT.GET.AGENTLOG", "a session's log: batched direct gets of its subject (Records, events, messages' refolds), and the last record of up to 512 sessions in one batch (sessions: multi_last); read only")
	// Follow reads (events --follow, the inspector's live view) are woken by a core subscription
	// on the session's subject, then read with direct gets.
	liveRecords = e(wire.SubjectPrefix+".>", "wake-ups of follow reads (events --follow, the inspector's live view): the records as they are published, read only")
	// Projection waits (messages --watch) are woken by a core subscription on the key's subject,
	// then read with a get.
	projectionWake = e(wire.ProjectionWakePrefix+".messages.*", "wake-ups of messages --watch: a messages state as a projector stores it (agentlog_projections republishes its headers), read only")
	projectionGet  = api("DIRECT.GET."+projectionsKV+".>", "a session's projection state (messages --watch reads it when woken): KV get")
	inbox          = e("_INBOX.>", "replies to its requests, and the deliveries of its consumers")
	srvDiscovery   = e("$SRV.>", "the micro protocol's PING, INFO and STATS requests (nats micro ls)")
	// Offloaded events: reading one (AGENTLOG_BLOBS, and legacy objects of agentlog_blobs), by
	// direct gets only (no consumer), and writing one.
	blobRead = []Entry{
		api("DIRECT.GET."+wire.BlobStream, "an offloaded event's chunks, in batches by subject (next_by_subj agentlog.blob.<token>.<id>.*)"),
		api("DIRECT.GET."+wire.BlobStream+".>", "one chunk by subject (a writer reads back a chunk it sent again)"),
		api("DIRECT.GET."+blobsObj+".>", "a legacy offloaded event (record format 2): its Object Store metadata, by subject"),
		api("DIRECT.GET."+blobsObj, "a legacy offloaded event's chunks, in batches by subject"),
	}
	// No purge and no Object Store right: a purge's filter is in its payload (it could purge
	// any session's blobs), and $O.agentlog_blobs.> would let it put the delete marker on
	// another session's object. A failed upload's chunks are left to the operator's blob GC.
	blobWrite = []Entry{
		e(wire.BlobPrefix+".>", "the chunks of the events it offloads (larger than a record), acked publishes with expected last subject sequence 0; write-once by AGENTLOG_BLOBS's config (one message per subject, discard new per subject): no chunk once stored can be overwritten or appended to, and a blob id is 128 random bits, so no one can take a blob's subjects before it is written; a failed upload's chunks are left to the operator's blob GC"),
	}
	// An archived session's log and state (the lifecycle, ARCHITECTURE.md): every reader of a
	// session reads its archive when its log lives there, and the lineage index for its forks.
	archiveRead = []Entry{
		api("DIRECT.GET."+wire.ArchiveStream, "archive heads and parts of a page of sessions, in one batch (listing, Locate): multi_last"),
		api("DIRECT.GET."+wire.ArchiveStream+".>", "an archive's head or part, by subject (an archived session's reads)"),
		api("STREAM.MSG.GET."+wire.ArchiveStream, "an archive's head and parts from the stream leader (reading an archived session)"),
		api("DIRECT.GET."+wire.ChildrenStream, "a session's forks from the lineage index (status, sessions --parent): multi_last"),
		api("DIRECT.GET."+lifecycleKV, "the legal holds of a page of sessions, in one batch (status, sessions --state held)"),
		api("DIRECT.GET."+lifecycleKV+".>", "one session's legal hold, the lifecycle policy"),
	}
	// The listing (client.Sessions: sessions, status, id prefixes and completion).
	listing = []Entry{
		api("DIRECT.GET."+sessionsKV, "the metadata of a page of sessions, in one batch, and of every session in batches (sessions: newest first, forks, holds; status, id prefixes)"),
		api("DIRECT.GET."+projectionsKV, "the projection states of a page of sessions, or of one session, in one batch (sessions --open-turn, --stopped, --title; status; the inspector's list)"),
		api("DIRECT.GET."+wire.ErrorsStream, "whether a page of sessions have agent/error reports (sessions --errored), and a session's reports (status, the inspector)"),
		logRead,
	}
)

// projectorConsumerRights are what the projector does with its durable partition consumers, by
// name: `agentlog provision` creates them, the projector creates none.
func projectorConsumerRights(partitions int) []Entry {
	var out []Entry
	for p := 0; p < partitions; p++ {
		name := wire.StreamName + "." + projector.PartitionConsumer(p)
		out = append(out,
			api("CONSUMER.INFO."+name, "its partition consumer's state (the start-up check, readiness, the lag metric)"),
			api("CONSUMER.MSG.NEXT."+name, "pulls from its partition consumer (pinned priority group)"),
			api("CONSUMER.UNPIN."+name, "hands the partition over to another instance at once"))
	}
	return out
}

// projectorConsumers deny what would let an agent or a viewer touch the projector's durable
// partition consumers (partitions of them): create or update one (with or without a filter in the
// subject), pull from it, delete it. Either could take a partition's records away from the projector.
func projectorConsumers(partitions int) []Entry {
	var out []Entry
	for p := 0; p < partitions; p++ {
		name := wire.StreamName + "." + projector.PartitionConsumer(p)
		out = append(out,
			api("CONSUMER.*."+name, "the projector's partition consumer: info, pull, delete, create without a filter"),
			api("CONSUMER.CREATE."+name+".>", "the projector's partition consumer: create or update with a filter"))
	}
	return out
}

// RolePermissions returns role's permissions for a tenant whose AGENTLOG stream has partitions
// partitions. SECURITY.md explains every entry; TestMultiTenant checks each role does its work with
// these and without a single violation, and is refused what the others do.
func RolePermissions(role Role, partitions int) (Permissions, error) {
	switch role {
	case Agent:
		return Permissions{
			Publish: concat([]Entry{
				e(wire.SubjectPrefix+".>", "the records it appends: guarded JetStream publishes, acked on its inbox"),
				e(wire.ErrorsPrefix+".>", "the publisher's error reports (AGENTLOG_ERRORS)"),
				e("$KV."+wire.SessionsBucket+".>", "session metadata: the KV create that claims a new session's id"),
				e(wire.ChildrenPrefix+".>", "the lineage link of a session it creates with a parentSession (AGENTLOG_CHILDREN)"),
				e("$KV."+wire.WritersBucket+".>", "its writer lease: create, renew, release (KV agentlog_writers)"),
				e("agentlog.fork", "the fork service"),
				e("agentlog.fork.then", "the fork service: a fork with then-events (edit-then-fork)"),
				e("agentlog.query.>", "the query service (messages, projection, snapshot, surface)"),
				api("INFO", "the account's limits and usage: the TypeScript backend's jetstreamManager reads them when it connects"),
				tailGet, leaderGet, metaGet,
				api("DIRECT.GET."+sessionsKV+".>", "a KV create over a removed session's delete marker reads that marker"),
				api("DIRECT.GET."+writersKV+".>", "another writer's lease, when its own create finds one (Open, Takeover)"),
				projectionGet,
			}, blobRead, blobWrite, listing, archiveRead, openEntries()),
			Subscribe:   []Entry{inbox, liveRecords, projectionWake},
			DenyPublish: projectorConsumers(partitions),
		}, nil
	case Viewer:
		return Permissions{
			Publish: concat([]Entry{
				e("agentlog.query.>", "the query service"),
				tailGet, leaderGet, metaGet,
				projectionGet,
				api("DIRECT.GET."+sessionsKV+".>", "a new session's metadata, when the inspector's live list is woken: KV get"),
			}, blobRead, listing, archiveRead, openEntries()),
			Subscribe: []Entry{inbox, liveRecords, projectionWake,
				e("$KV."+wire.SessionsBucket+".*", "wake-ups of the inspector's live list: session metadata as it is written, read only")},
			DenyPublish: projectorConsumers(partitions),
			OwnAccount:  true,
		}, nil
	case Projector:
		return Permissions{
			Publish: concat([]Entry{
				e("$KV."+wire.ProjectionsBucket+".>", "checkpoints: the projection states, with a revision compare-and-swap; a KV delete of each key of a session removed while it folded it (no stream purge: its filter is in the payload; no KV purge: the bucket refuses rollup headers)"),
				e("$KV."+projector.MembersBucket+".>", "its instance lease in agentlog_projector_members"),
				e("$JS.ACK."+wire.StreamName+".>", "acks of its partition consumers"),
				api("STREAM.INFO."+membersKV, "opens the members bucket (`agentlog provision` creates it: the projector creates no stream)"),
				api("DIRECT.GET."+membersKV+".>", "reads member leases"),
				api("DIRECT.GET."+membersKV, "lists the members: one batched direct get (multi_last), no consumer"),
			}, projectorConsumerRights(partitions), []Entry{
				tailGet, leaderGet,
				api("DIRECT.GET.AGENTLOG", "a record by stream seq (the query cache, the lag metric), and a session's log: batched direct gets of its subject (refolds)"),
				metaGet,
				api("DIRECT.GET."+projectionsKV+".>", "reads projection states"),
				api("DIRECT.GET."+projectionsKV, "lists a removed session's projection keys (multi_last), before it purges them"),
			}, blobRead, archiveRead, openEntries()),
			Subscribe: []Entry{inbox, e("agentlog.query.>", "serves the query service (queue group q), exported from its account to the tenant's and the viewer's"), e("$SRV.>", "the micro protocol's PING, INFO and STATS requests (nats micro ls), in its own account only: the tenant's account does not import them"),
				e(wire.ProjectionWakePrefix+".messages.*", "wake-ups of the query service's minSeq waits: the messages states as projectors store them (agentlog_projections republishes their headers), read only")},
			AllowResponses: true,
			// In an account of its own: a reply subject it sets on a request (a KV put, a direct
			// get) lives there, so no answer lands in a session's subject or the metadata bucket.
			OwnAccount: true,
			Serves:     []string{"agentlog.query.>"},
		}, nil
	case Forker:
		return Permissions{
			Publish: concat([]Entry{
				e(wire.SubjectPrefix+".>", "the child's seed record, guarded with expected sequence 0"),
				e("$KV."+wire.SessionsBucket+".>", "the child's metadata: the KV create that claims its id, its undo, and the removed mark that leaves a child removed during its fork to agentlog rm (no purge right: its filter is in the payload)"),
				e(wire.ChildrenPrefix+".>", "the child's lineage link (AGENTLOG_CHILDREN), written before its metadata"),
				tailGet, leaderGet, metaGet,
				api("DIRECT.GET."+sessionsKV+".>", "reads the child's claim (an abandoned fork can be resumed)"),
				logRead,
			}, blobRead, blobWrite, archiveRead, openEntries()),
			Subscribe: []Entry{inbox, e("agentlog.fork", "serves the fork service (queue group q)"),
				e("agentlog.fork.then", "serves forks with then-events (queue group q)"), srvDiscovery},
			AllowResponses: true,
		}, nil
	case Operator:
		return Permissions{
			Publish:   []Entry{e(">", "everything in the tenant's account: provision, rm (a stream purge), rebuild, stream and consumer administration")},
			Subscribe: []Entry{e(">", "everything in the tenant's account")},
		}, nil
	}
	return Permissions{}, fmt.Errorf("unknown role %q (want one of %v)", role, Roles)
}

func concat(lists ...[]Entry) []Entry {
	var out []Entry
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// conf renders p as a nats-server permissions block.
func (p Permissions) conf(indent string) string {
	var b strings.Builder
	list := func(xs []Entry) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = strconv.Quote(x.Subject)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	fmt.Fprintf(&b, "{\n%s  publish: { allow: %s", indent, list(p.Publish))
	if len(p.DenyPublish) > 0 {
		fmt.Fprintf(&b, ", deny: %s", list(p.DenyPublish))
	}
	fmt.Fprintf(&b, " }\n%s  subscribe: { allow: %s", indent, list(p.Subscribe))
	if len(p.DenySubscribe) > 0 {
		fmt.Fprintf(&b, ", deny: %s", list(p.DenySubscribe))
	}
	b.WriteString(" }\n")
	if p.AllowResponses {
		fmt.Fprintf(&b, "%s  allow_responses: { max: 1, expires: \"2m\" }\n", indent)
	}
	b.WriteString(indent + "}")
	return b.String()
}
