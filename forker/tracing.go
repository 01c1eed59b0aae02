package forker

import (
	"context"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// startForkSpan starts the span of one fork request, a child of the trace context in its headers
// (client.Client sends it).
func (f *Forker) startForkSpan(ctx context.Context, h nats.Header) (context.Context, trace.Span) {
	if sc := tracing.Extract(h); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return f.tracer.Start(ctx, "agentlog.fork", trace.WithSpanKind(trace.SpanKindServer))
}

// endForkSpan ends a fork's span with its reply code and, on success, the child.
func endForkSpan(span trace.Span, res client.ForkResult, code client.Code, desc string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("agentlog.code", string(code)))
		if code == "200" {
			span.SetAttributes(attribute.String("agentlog.session", res.ParentSession), attribute.String("agentlog.child", res.Child),
				attribute.Int("agentlog.seed_length", res.SeedLength))
		} else {
			span.SetStatus(codes.Error, desc)
		}
	}
	span.End()
}
