package multitenant

import (
	"fmt"
	"strconv"
	"strings"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/projector"
)

// Role is one of the identities of a tenant. Its permissions apply inside the tenant's own NATS
// account; what is outside the account (other tenants) no permission can reach.
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
	Publish, Subscribe         []string
	DenyPublish, DenySubscribe []string
	AllowResponses             bool
}

// api is $JS.API.<rest>.
func api(rest ...string) []string {
	out := make([]string, len(rest))
	for i, r := range rest {
		out[i] = "$JS.API." + r
	}
	return out
}

const (
	sessionsKV    = "KV_" + ajs.SessionsBucket
	projectionsKV = "KV_" + ajs.ProjectionsBucket
	writersKV     = "KV_" + ajs.WritersBucket
	membersKV     = "KV_" + projector.MembersBucket
)

// info is the account info request (limits and usage of the own account; nats.go asks it before
// creating a KV bucket) and the stream info request of each of names (jetstream.Open checks every
// stream and bucket).
func info(names ...string) []string {
	out := api("INFO")
	for _, s := range names {
		out = append(out, api("STREAM.INFO."+s)...)
	}
	return out
}

// gets are the requests that read one message of each of names: by seq or last-by-subject from the
// leader (STREAM.MSG.GET) or any replica (DIRECT.GET, whose last-by-subject form names the subject).
func gets(names ...string) []string {
	var out []string
	for _, s := range names {
		out = append(out, api("STREAM.MSG.GET."+s, "DIRECT.GET."+s, "DIRECT.GET."+s+".>")...)
	}
	return out
}

// consumers are the requests of ephemeral (ordered) consumers on each of names: create (with its
// filter in the subject), info, pull and delete.
func consumers(names ...string) []string {
	var out []string
	for _, s := range names {
		out = append(out, api("CONSUMER.CREATE."+s+".>", "CONSUMER.INFO."+s+".*", "CONSUMER.MSG.NEXT."+s+".*", "CONSUMER.DELETE."+s+".*")...)
	}
	return out
}

// allStreams are the streams and buckets jetstream.Open looks up.
var allStreams = []string{ajs.StreamName, ajs.ErrorsStream, sessionsKV, projectionsKV, writersKV}

// projectorConsumers deny what would let an agent or a viewer touch the projector's durable
// partition consumers (partitions of them): create or update one (with or without a filter in the
// subject), pull from it, delete it. Either could take a partition's records away from the projector.
func projectorConsumers(partitions int) []string {
	var out []string
	for p := 0; p < partitions; p++ {
		name := ajs.StreamName + "." + projector.PartitionConsumer(p)
		out = append(out, api("CONSUMER.*."+name, "CONSUMER.CREATE."+name+".>")...)
	}
	return out
}

// RolePermissions returns role's permissions for a tenant whose AGENTLOG stream has partitions
// partitions. SECURITY.md explains every entry; the tests check each role can do its work with
// these and nothing more.
func RolePermissions(role Role, partitions int) (Permissions, error) {
	inbox := []string{"_INBOX.>"}
	switch role {
	case Agent:
		return Permissions{
			Publish: concat(
				[]string{
					ajs.SubjectPrefix + ".>",           // records: guarded JetStream publishes (ack to the inbox)
					ajs.ErrorsPrefix + ".>",            // the publisher's error reports
					"$KV." + ajs.SessionsBucket + ".>", // session metadata: the KV create that claims an id
					"$KV." + ajs.WritersBucket + ".>",  // the writer lease (create, renew, release)
					"agentlog.fork",                    // the fork service
					"agentlog.query.>",                 // the query service
				},
				info(allStreams...),
				gets(ajs.StreamName, sessionsKV, projectionsKV, writersKV),
				consumers(ajs.StreamName, sessionsKV, projectionsKV),
			),
			Subscribe:   concat(inbox, []string{ajs.SubjectPrefix + ".>"}),
			DenyPublish: projectorConsumers(partitions),
		}, nil
	case Viewer:
		return Permissions{
			Publish: concat(
				[]string{"agentlog.query.>"},
				info(allStreams...),
				gets(ajs.StreamName, sessionsKV, projectionsKV),
				consumers(ajs.StreamName, sessionsKV, projectionsKV),
			),
			Subscribe:   concat(inbox, []string{ajs.SubjectPrefix + ".>"}),
			DenyPublish: projectorConsumers(partitions),
		}, nil
	case Projector:
		return Permissions{
			Publish: concat(
				[]string{
					"$KV." + ajs.ProjectionsBucket + ".>",   // checkpoints
					"$KV." + projector.MembersBucket + ".>", // the instance's lease
					"$JS.ACK." + ajs.StreamName + ".>",      // acks of the partition consumers
				},
				info(append(allStreams, membersKV)...),
				gets(ajs.StreamName, sessionsKV, projectionsKV, membersKV),
				consumers(ajs.StreamName, projectionsKV, membersKV),
				api(
					"STREAM.CREATE."+membersKV, // recreated when lost
					"STREAM.DELETE."+membersKV, // replaced when of an older version
					"STREAM.PURGE."+projectionsKV,
					"CONSUMER.DURABLE.CREATE."+ajs.StreamName+".*",
					"CONSUMER.UNPIN."+ajs.StreamName+".*",
				),
			),
			Subscribe:      concat(inbox, []string{"agentlog.query.>", "$SRV.>"}),
			AllowResponses: true,
		}, nil
	case Forker:
		return Permissions{
			Publish: concat(
				[]string{
					ajs.SubjectPrefix + ".>",           // the child's seed record
					"$KV." + ajs.SessionsBucket + ".>", // the child's metadata (claim, undo)
				},
				api("STREAM.PURGE."+ajs.StreamName),
				info(allStreams...),
				gets(ajs.StreamName, sessionsKV),
				consumers(ajs.StreamName),
			),
			Subscribe:      concat(inbox, []string{"agentlog.fork", "$SRV.>"}),
			AllowResponses: true,
		}, nil
	case Operator:
		return Permissions{Publish: []string{">"}, Subscribe: []string{">"}}, nil
	}
	return Permissions{}, fmt.Errorf("unknown role %q (want one of %v)", role, Roles)
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// conf renders p as a nats-server permissions block.
func (p Permissions) conf(indent string) string {
	var b strings.Builder
	list := func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = strconv.Quote(x)
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
