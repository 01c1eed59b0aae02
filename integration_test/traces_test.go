package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceLinksAppendToFold: on a real embedded server, an agent's span around Append and Flush
// is the parent of the publisher's append span; the record carries its W3C trace context, and
// the projector's fold of that record is a child of the append span and links to it; a query
// and a fork made with the agent's context are children of the agent's span, and the fork's
// child record is folded in the fork's trace. Spans go to an in-memory exporter.
func TestTraceLinksAppendToFold(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	env := testnats.Start(t, store.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proj, err := projector.New(env.Store, env.NC, projector.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if err := proj.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proj.Stop() })
	fk, err := forker.New(env.Store, env.NC, forker.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if err := fk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fk.Stop() })
	pub := newPublisher(t, env.Store, env.NC, publisher.Options{TracerProvider: tp})

	// The agent's own span, as an instrumented agent would have.
	actx, agent := tp.Tracer("agent").Start(ctx, "agent turn")
	const id = "traced"
	w, err := pub.Create(actx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	events := append(chunkEvents("traced", 0, 6),
		session.Event{Seq: 6, Time: "1785000000000", Type: "step/end", Data: []byte(`{"turn":1,"step":1}`)},
		session.Event{Seq: 7, Time: "1785000000000", Type: "turn/end", Data: []byte(`{"turn":1,"reason":{"kind":"completed"}}`)})
	for _, ev := range events {
		if err := w.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(actx); err != nil {
		t.Fatal(err)
	}

	// The record carries the append span's trace context in its headers.
	sub, _ := wire.SessionSubject(id, env.Store.Partitions())
	rec, err := env.Store.Stream().GetLastMsgForSubject(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if tracing.Extract(rec.Header).TraceID() != agent.SpanContext().TraceID() {
		t.Fatalf("record headers %v carry no trace context of the agent's trace %s", rec.Header, agent.SpanContext().TraceID())
	}

	c, err := client.New(env.NC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages(actx, id, client.MinSeq(int64(len(events)-1))); err != nil {
		t.Fatal(err)
	}
	at := int64(len(events) - 1)
	res, err := c.Fork(actx, client.ForkRequest{Source: id, Child: id + "-child", Boundary: &at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages(ctx, res.Child, client.MinSeq(int64(res.SeedLength))); err != nil {
		t.Fatal(err)
	}
	agent.End()

	var appendSpan, forkSpan, querySpan tracetest.SpanStub
	var folds []tracetest.SpanStub
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("the append, query, fork and both folds are exported", func() bool {
		appendSpan, forkSpan, querySpan, folds = tracetest.SpanStub{}, tracetest.SpanStub{}, tracetest.SpanStub{}, nil
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "agentlog.append":
				if attr(s, "agentlog.session") == id {
					appendSpan = s
				}
			case "agentlog.fork":
				forkSpan = s
			case "agentlog.query messages":
				if attr(s, "agentlog.session") == id {
					querySpan = s
				}
			case "agentlog.fold":
				folds = append(folds, s)
			}
		}
		return appendSpan.Name != "" && forkSpan.Name != "" && querySpan.Name != "" && len(folds) >= 2
	}))
	agentSC := agent.SpanContext()
	if appendSpan.Parent.SpanID() != agentSC.SpanID() || appendSpan.SpanKind != trace.SpanKindProducer {
		t.Errorf("append span: parent %s, kind %s; want the agent's span %s, producer", appendSpan.Parent.SpanID(), appendSpan.SpanKind, agentSC.SpanID())
	}
	var parentFold, childFold *tracetest.SpanStub
	for i := range folds {
		switch attr(folds[i], "agentlog.session") {
		case id:
			parentFold = &folds[i]
		case res.Child:
			childFold = &folds[i]
		}
	}
	if parentFold == nil || childFold == nil {
		t.Fatalf("folds of %q and %q not both exported: %d fold spans", id, res.Child, len(folds))
	}
	linked := false
	for _, l := range parentFold.Links {
		linked = linked || (l.SpanContext.TraceID() == appendSpan.SpanContext.TraceID() && l.SpanContext.SpanID() == appendSpan.SpanContext.SpanID())
	}
	if !linked {
		t.Errorf("the fold span's links %+v do not name the append span %s", parentFold.Links, appendSpan.SpanContext.SpanID())
	}
	if parentFold.Parent.SpanID() != appendSpan.SpanContext.SpanID() || parentFold.SpanContext.TraceID() != agentSC.TraceID() {
		t.Errorf("fold span: parent %s in trace %s; want the append span %s in the agent's trace %s",
			parentFold.Parent.SpanID(), parentFold.SpanContext.TraceID(), appendSpan.SpanContext.SpanID(), agentSC.TraceID())
	}
	if querySpan.Parent.SpanID() != agentSC.SpanID() {
		t.Errorf("query span's parent %s, want the agent's span %s", querySpan.Parent.SpanID(), agentSC.SpanID())
	}
	if forkSpan.Parent.SpanID() != agentSC.SpanID() || attr(forkSpan, "agentlog.child") != res.Child {
		t.Errorf("fork span: parent %s, child %q; want the agent's span %s, %q", forkSpan.Parent.SpanID(), attr(forkSpan, "agentlog.child"), agentSC.SpanID(), res.Child)
	}
	if childFold.Parent.SpanID() != forkSpan.SpanContext.SpanID() {
		t.Errorf("the child's fold has parent %s, want the fork span %s", childFold.Parent.SpanID(), forkSpan.SpanContext.SpanID())
	}
}

// TestNoTraceContextWhenOff: with the default (no-op) tracer provider a record carries no
// trace headers.
func TestNoTraceContextWhenOff(t *testing.T) {
	env := testnats.Start(t, store.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub := newPublisher(t, env.Store, env.NC, publisher.Options{})
	w, err := pub.Create(ctx, session.Header{ID: "untraced", CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range chunkEvents("untraced", 0, 3) {
		if err := w.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sub, _ := wire.SessionSubject("untraced", env.Store.Partitions())
	rec, err := env.Store.Stream().GetLastMsgForSubject(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if v := rec.Header.Get(tracing.HeaderTraceparent); v != "" {
		t.Fatalf("tracing is off, yet the record has traceparent %q", v)
	}
}

// attr is the string value of span attribute key ("" when absent).
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(key) {
			return kv.Value.String()
		}
	}
	return ""
}
