package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracesEnabled reports whether the environment asks for traces: OTEL_TRACES_EXPORTER is set to
// something other than "none", and OTEL_SDK_DISABLED is not "true".
func tracesEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	return exp != "" && exp != "none"
}

// setupTraces installs the OpenTelemetry SDK as the global tracer provider when tracesEnabled: the exporter
// named by OTEL_TRACES_EXPORTER (otlp, console; autoexport reads OTEL_EXPORTER_OTLP_* for the
// endpoint, protocol and headers), a batch span processor (OTEL_BSP_*), the sampler of
// OTEL_TRACES_SAMPLER, and a resource from OTEL_RESOURCE_ATTRIBUTES with service.name
// defaulting to service (OTEL_SERVICE_NAME wins). It also sets the global propagator to W3C
// trace context and baggage. Otherwise it does nothing. shutdown flushes the spans still queued.
func setupTraces(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if !tracesEnabled() {
		return noop, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return noop, fmt.Errorf("traces: exporter from OTEL_TRACES_EXPORTER=%q: %w", os.Getenv("OTEL_TRACES_EXPORTER"), err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", service)), resource.Environment())
	if err != nil {
		res = resource.Environment()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}
