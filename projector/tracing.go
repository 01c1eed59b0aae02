package projector

import (
	"context"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// startFoldSpan starts the span of the fold of one record ("agentlog.fold"). When the record
// carries a trace context (the writer's append span), the fold is its child and links to it, so
// the writer's trace shows the fold of its events.
func (p *Projector) startFoldSpan(msg jetstream.Msg, part int) trace.Span {
	ctx := context.Background()
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	if sc := tracing.Extract(msg.Headers()); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := p.tracer.Start(ctx, "agentlog.fold", opts...)
	if span.IsRecording() {
		h := msg.Headers()
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.Int("agentlog.partition", part),
			attribute.String("agentlog.first_seq", h.Get(wire.HeaderFirstSeq)),
			attribute.String("agentlog.events", h.Get(wire.HeaderCount)),
		)
		if _, _, id, err := wire.ParseSubject(msg.Subject(), p.store.Partitions()); err == nil {
			span.SetAttributes(attribute.String("agentlog.session", id))
		}
		if meta, err := msg.Metadata(); err == nil {
			span.SetAttributes(attribute.Int64("agentlog.stream_seq", int64(meta.Sequence.Stream)))
		}
	}
	return span
}

// startSpan starts the span of one query ("agentlog.query <endpoint>"), a child of the trace
// context in the request's headers (client.Client sends it).
func (s *queryService) startSpan(endpoint string, h nats.Header) trace.Span {
	ctx := context.Background()
	if sc := tracing.Extract(h); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	_, span := s.tracer.Start(ctx, "agentlog.query "+endpoint, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("agentlog.endpoint", endpoint)))
	return span
}

// endQuerySpan ends a query's span with its reply code.
func endQuerySpan(span trace.Span, session string, code client.Code, desc string) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("agentlog.session", session), attribute.String("agentlog.code", string(code)))
		if code != codeOK {
			span.SetStatus(codes.Error, desc)
		}
	}
	span.End()
}
