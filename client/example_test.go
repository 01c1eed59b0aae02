package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/nats-io/nats.go"
)

// Read your own writes: wait until the projector has applied seq 41, then print the history.
func ExampleClient_Messages() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		return
	}
	defer nc.Close()
	c, err := client.New(nc, client.Timeout(10*time.Second))
	if err != nil {
		return
	}
	reply, err := c.Messages(context.Background(), "session-1", client.MinSeq(41))
	switch {
	case errors.Is(err, client.ErrTimeout):
		fmt.Println("the projector is behind")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(len(reply.Messages), "messages as of seq", reply.AsOfSeq)
	}
}

// Fork at a turn boundary; a refusal carries the reference's code and text.
func ExampleClient_Fork() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		return
	}
	defer nc.Close()
	c, _ := client.New(nc)
	at := int64(7)
	res, err := c.Fork(context.Background(), client.ForkRequest{Source: "session-1", Boundary: &at})
	var ce *client.Error
	switch {
	case errors.Is(err, client.ErrOpenTurn) && errors.As(err, &ce):
		fmt.Println("refused:", ce.Code, ce.Description)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("forked", res.Child, "with", res.SeedLength, "events")
	}
}

func ExampleError() {
	err := fmt.Errorf("fork: %w", &client.Error{
		Service:     client.ForkService,
		Code:        client.CodeSessionExists,
		Session:     "parent",
		Description: `session "child" already exists`,
	})
	fmt.Println(errors.Is(err, client.ErrExists))
	fmt.Println(err)
	// Output:
	// true
	// fork: agentlog-fork: session "child" already exists (code SESSION_ALREADY_EXISTS)
}
