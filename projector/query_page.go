package projector

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/agentlog/agentlog/client"
)

// pageSpec is what one page of a messages reply is cut from (messagesPage).
type pageSpec struct {
	// reply is the page's envelope: Session, AsOfSeq and ReplaceGeneration (the rest is set by
	// messagesPage).
	reply client.MessagesReply
	// nodes are the surface nodes whose messages are asked for, in order: all of the surface's
	// on a first page, the request's on a continuation.
	nodes []int64
	// first is a first page, whose Nodes list every node; a continuation's list the nodes it covers.
	first bool
	// external lists a message too large for any page in External (the client derives it from
	// the log) instead of failing the query "413".
	external bool
	// maxPayload is the server's max payload in bytes (≤ 0: unbounded). A reply is kept 64 bytes
	// below it.
	maxPayload int64
	// derive returns the messages of one node (zero or one); its error is a node that derives none.
	derive func(seq int64) ([]json.RawMessage, error)
	// streamSeq is the stream seq of the record holding a node's event (for External).
	streamSeq func(seq int64) uint64
}

// messagesPage cuts one page of a messages reply: the messages of the longest prefix of
// spec.nodes whose reply fits within spec.maxPayload − 64 bytes. When not every node fits,
// Partial = k says that the page covers the first k nodes (k may be 0 on a first page: the client
// continues with the rest). It derives the nodes' messages in order and stops at the first that
// does not fit. Errors (a *queryError): "413" when the envelope alone (the node list of a first
// page) is too large, or when a continuation's first message does not fit alone and
// spec.external is not set; a node that derives no message "500" (a first page: the stored
// surface is wrong) or "400" (a continuation: the client asked for it).
func messagesPage(spec pageSpec) (client.MessagesReply, error) {
	reply := spec.reply
	reply.Nodes, reply.Messages, reply.External, reply.Partial = spec.nodes, []json.RawMessage{}, nil, nil
	nodes := spec.nodes
	if !spec.first {
		reply.Nodes = []int64{} // the nodes the page covers, added below
	}
	id := reply.Session
	envelope, err := encodeReply(reply)
	if err != nil {
		return client.MessagesReply{}, replyErr(client.CodeInternal, "session %q: encoding the reply: %v", id, err)
	}
	// A reply without headers (success) may take the whole max payload; keep a little room.
	limit := int64(1 << 62)
	if spec.maxPayload > 0 {
		limit = spec.maxPayload - 64
	}
	if int64(len(envelope)) > limit {
		return client.MessagesReply{}, replyErr(client.CodeTooLarge, "session %q: its %d surface nodes alone take %d bytes, more than one reply can carry (the server's max payload is %d bytes)",
			id, len(nodes), len(envelope), spec.maxPayload)
	}
	// Room for `,"partial":k` too, in case the reply cannot cover every node.
	size := int64(len(envelope) + len(`,"partial":`) + len(strconv.Itoa(len(nodes))))
	// A message larger than this fits on no page, not even alone on the smallest one: with
	// external it is listed for the client to derive from the log, else the query fails 413.
	alone := limit - int64(len(`,"partial":0,"external":[]`)) - smallestPage(reply)
	covered := len(nodes)
	for i, seq := range nodes {
		msgs, err := spec.derive(seq)
		if err != nil {
			code := client.CodeInternal
			if !spec.first {
				code = client.CodeBadRequest
			}
			// DeriveMessages does not know the session (its *session.Error has none): this reply names it.
			return client.MessagesReply{}, replyErr(code, "session %q: deriving the message of surface node seq %d at asOfSeq %d: %v", id, seq, reply.AsOfSeq, err)
		}
		var add int64
		for _, m := range msgs {
			add += int64(len(m)) + 1 // the message and its comma
		}
		if !spec.first {
			add += int64(len(strconv.FormatInt(seq, 10))) + 1 // the node and its comma
		}
		if spec.external && add > alone {
			x := client.ExternalMessage{Index: len(reply.Messages) + len(reply.External), Node: seq, StreamSeq: spec.streamSeq(seq)}
			xb, _ := json.Marshal(x)
			if add = int64(len(xb)) + 1; !spec.first {
				add += int64(len(strconv.FormatInt(seq, 10))) + 1
			}
			if len(reply.External) == 0 {
				add += int64(len(`,"external":[]`))
			}
			if size+add <= limit {
				size += add
				reply.External = append(reply.External, x)
				continue
			}
		}
		if size+add > limit {
			if i == 0 && !spec.first {
				// Alone on a page with the smallest envelope, it still does not fit.
				return client.MessagesReply{}, replyErr(client.CodeTooLarge, "session %q: the message of surface node seq %d takes %d bytes; with the reply's other %d bytes that is more than one reply can carry (the server's max payload is %d bytes)",
					id, seq, add, size, spec.maxPayload)
			}
			covered = i
			reply.Partial = &covered
			break
		}
		size += add
		reply.Messages = append(reply.Messages, msgs...)
	}
	if !spec.first {
		reply.Nodes = nodes[:covered]
	}
	return reply, nil
}

// smallestPage is the size of the smallest page of reply's session: a continuation page with one
// node of the largest seq and no messages.
func smallestPage(reply client.MessagesReply) int64 {
	reply.Nodes, reply.Messages, reply.External, reply.Partial = []int64{math.MaxInt64}, []json.RawMessage{}, nil, nil
	b, _ := encodeReply(reply)
	return int64(len(b))
}

// encodeReply encodes v without HTML-escaping (messages keep their bytes '<', '>', '&' as stored)
// and without the encoder's trailing newline.
func encodeReply(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
