// Package tracing holds agentlog's OpenTelemetry plumbing: the W3C trace context (traceparent,
// tracestate) carried in NATS headers of records and service requests (Inject, Extract,
// Carrier), and the instrumentation scope every package names its tracer with (Tracer). It uses
// the OpenTelemetry API only: the SDK and its exporters are set up by the binary
// (cmd/agentlog/traces.go), so a library never links them.
//
// Without an SDK installed, the library packages use otel.GetTracerProvider(), the no-op
// provider, and Inject writes nothing (no header, no allocation) because the span context is
// not valid.
package tracing

import (
	"context"

	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of agentlog's tracers.
const ScopeName = "github.com/agentlog/agentlog"

// Header names of the W3C trace context in records and requests (lower case, as the W3C
// spells them: NATS headers are case-sensitive).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// propagator is W3C trace context, independent of the global propagator (the default global one
// propagates nothing).
var propagator = propagation.TraceContext{}

// Tracer returns the tracer of tp (nil: otel.GetTracerProvider()) for agentlog's scope.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// Carrier adapts a nats.Header to propagation.TextMapCarrier with exact (case-sensitive) keys.
type Carrier nats.Header

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c Carrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the keys.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the span context of ctx into h as traceparent (and tracestate when set). It
// writes nothing when ctx carries no valid span context (tracing off).
func Inject(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, Carrier(h))
}

// Headers returns the trace context of ctx as header key/value pairs (traceparent, then
// tracestate when set), or nil when ctx carries no valid span context.
func Headers(ctx context.Context) []string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := nats.Header{}
	propagator.Inject(ctx, Carrier(h))
	kv := []string{HeaderTraceparent, h.Get(HeaderTraceparent)}
	if ts := h.Get(HeaderTracestate); ts != "" {
		kv = append(kv, HeaderTracestate, ts)
	}
	return kv
}

// Extract returns the remote span context carried by h (invalid when h carries none).
func Extract(h nats.Header) trace.SpanContext {
	if len(h[HeaderTraceparent]) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), Carrier(h)))
}

// RecordOpts are the store options of a record write: its Nats-Msg-Id and, when ctx carries a
// valid span context, the trace context headers (no extra allocation when it does not).
func RecordOpts(ctx context.Context, msgID string) []store.AppendOpt {
	if kv := Headers(ctx); kv != nil {
		return []store.AppendOpt{store.WithMsgID(msgID), store.WithHeaders(kv...)}
	}
	return []store.AppendOpt{store.WithMsgID(msgID)}
}
