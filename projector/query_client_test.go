package projector

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The tests' queries go through package client; minSeq -1 does not wait.

func queryClient(nc *nats.Conn, minSeq int64) (*client.Client, []client.Option) {
	c, err := client.New(nc)
	if err != nil {
		panic(err) // nc is never nil here
	}
	if minSeq < 0 {
		return c, nil
	}
	return c, []client.Option{client.MinSeq(minSeq)}
}

func queryMessages(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (client.MessagesReply, error) {
	c, opts := queryClient(nc, minSeq)
	return c.Messages(ctx, id, opts...)
}

func querySurface(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (Projection, error) {
	c, opts := queryClient(nc, minSeq)
	return c.Surface(ctx, id, opts...)
}

func querySnapshot(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (client.SnapshotReply, error) {
	c, opts := queryClient(nc, minSeq)
	return c.Snapshot(ctx, id, opts...)
}

func queryProjection(ctx context.Context, nc *nats.Conn, id, unit string, minSeq int64) (client.ProjectionReply, error) {
	c, opts := queryClient(nc, minSeq)
	return c.Projection(ctx, id, unit, opts...)
}

// queryMessagesPage sends q to the messages endpoint once: one page, not joined.
func queryMessagesPage(ctx context.Context, nc *nats.Conn, q client.QueryRequest) (client.MessagesReply, error) {
	data, err := json.Marshal(q)
	if err != nil {
		return client.MessagesReply{}, err
	}
	msg, err := nc.RequestWithContext(ctx, client.MessagesSubject, data)
	if err != nil {
		return client.MessagesReply{}, err
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return client.MessagesReply{}, &client.Error{Service: client.QueryService, Code: client.Code(code), Session: q.Session, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	var r client.MessagesReply
	err = json.Unmarshal(msg.Data, &r)
	return r, err
}

// queryErr asserts err is a *client.Error with code and a description naming the session.
func queryErr(t *testing.T, err error, code client.Code, id string) *client.Error {
	t.Helper()
	var qe *client.Error
	if !errors.As(err, &qe) {
		t.Fatalf("want a *client.Error %s, got %T %v", code, err, err)
	}
	if qe.Code != code {
		t.Fatalf("want code %s, got %s (%s)", code, qe.Code, qe.Description)
	}
	if id != "" && !strings.Contains(qe.Description, strconv.Quote(id)) {
		t.Fatalf("description %q does not name session %q", qe.Description, id)
	}
	return qe
}
