package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		exporter, disabled string
		want               bool
	}{{"", "", false}, {"none", "", false}, {"otlp", "", true}, {"console", "true", false}, {"otlp", "false", true}} {
		t.Setenv("OTEL_TRACES_EXPORTER", c.exporter)
		t.Setenv("OTEL_SDK_DISABLED", c.disabled)
		if got := Enabled(); got != c.want {
			t.Errorf("OTEL_TRACES_EXPORTER=%q OTEL_SDK_DISABLED=%q: Enabled() = %v, want %v", c.exporter, c.disabled, got, c.want)
		}
	}
}

// TestSetupOff: without an exporter Setup leaves the global no-op provider in place.
func TestSetupOff(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	before := otel.GetTracerProvider()
	shutdown, err := Setup(context.Background(), "agentlog-test")
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("Setup installed a provider with tracing off")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSetupBadExporter: an exporter name autoexport does not know is an error naming it.
func TestSetupBadExporter(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "nosuch")
	if _, err := Setup(context.Background(), "agentlog-test"); err == nil {
		t.Fatal("Setup accepted OTEL_TRACES_EXPORTER=nosuch")
	}
}

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
