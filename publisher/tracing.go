package publisher

import (
	"context"

	"github.com/agentlog/agentlog/session"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// startAppendSpan starts the span of one record write of session id (events, Nats-Msg-Id msgID).
// With tracing off it is a non-recording span and costs one context.
func (p *Publisher) startAppendSpan(ctx context.Context, id, msgID string, events []session.Event) (context.Context, trace.Span) {
	ctx, span := p.tracer.Start(ctx, "agentlog.append", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("agentlog.session", id),
			attribute.Int64("agentlog.first_seq", events[0].Seq),
			attribute.Int("agentlog.events", len(events)),
			attribute.String("messaging.message.id", msgID),
		)
	}
	return ctx, span
}

// endAppendSpan ends span with the record's stream seq, or its error.
func endAppendSpan(span trace.Span, streamSeq uint64, err error) {
	if span.IsRecording() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.Int64("agentlog.stream_seq", int64(streamSeq)))
		}
	}
	span.End()
}
