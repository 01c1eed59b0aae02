package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestInjectExtract: a span context survives Inject and Extract through nats headers, with the
// W3C lower-case keys; without a valid span context nothing is written.
func TestInjectExtract(t *testing.T) {
	h := nats.Header{}
	Inject(context.Background(), h)
	if len(h) != 0 || Headers(context.Background()) != nil {
		t.Fatalf("no span context, yet headers %v", h)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	Inject(ctx, h)
	if h.Get(HeaderTraceparent) == "" {
		t.Fatalf("headers %v have no %s", h, HeaderTraceparent)
	}
	got := Extract(h)
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want %v (remote)", got, span.SpanContext())
	}
	if kv := Headers(ctx); len(kv) != 2 || kv[0] != HeaderTraceparent || kv[1] != h.Get(HeaderTraceparent) {
		t.Fatalf("Headers = %v", kv)
	}
	if Extract(nats.Header{}).IsValid() || (trace.SpanContext{}).IsValid() {
		t.Fatal("empty headers gave a valid span context")
	}
}

// BenchmarkRecordSpanOff is what tracing adds to one record write when it is off: a span of the
// global no-op provider and the record's options (no trace headers).
func BenchmarkRecordSpanOff(b *testing.B) {
	tr := Tracer(nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sctx, span := tr.Start(ctx, "agentlog.append")
		if len(RecordOpts(sctx, "w.tok.inc.0")) != 1 {
			b.Fatal("trace headers with tracing off")
		}
		span.End()
	}
}
