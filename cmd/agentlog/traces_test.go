package main

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
)

// TestTracesEnabled: OTEL_TRACES_EXPORTER turns traces on unless it is none; OTEL_SDK_DISABLED=true
// turns them off.
func TestTracesEnabled(t *testing.T) {
	for _, c := range []struct {
		exporter, disabled string
		want               bool
	}{{"", "", false}, {"none", "", false}, {"otlp", "", true}, {"console", "true", false}, {"otlp", "false", true}} {
		t.Setenv("OTEL_TRACES_EXPORTER", c.exporter)
		t.Setenv("OTEL_SDK_DISABLED", c.disabled)
		if got := tracesEnabled(); got != c.want {
			t.Errorf("OTEL_TRACES_EXPORTER=%q OTEL_SDK_DISABLED=%q: tracesEnabled() = %v, want %v", c.exporter, c.disabled, got, c.want)
		}
	}
}

// TestSetupTracesOff: without an exporter setupTraces leaves the global no-op provider in place.
func TestSetupTracesOff(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	before := otel.GetTracerProvider()
	shutdown, err := setupTraces(context.Background(), "agentlog-test")
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("setupTraces installed a provider with tracing off")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSetupTracesBadExporter: an exporter name autoexport does not know is an error naming it.
func TestSetupTracesBadExporter(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "nosuch")
	if _, err := setupTraces(context.Background(), "agentlog-test"); err == nil {
		t.Fatal("setupTraces accepted OTEL_TRACES_EXPORTER=nosuch")
	}
}
