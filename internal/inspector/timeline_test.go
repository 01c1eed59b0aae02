package inspector

import (
	"testing"

	"github.com/agentlog/agentlog/internal/sessiontest"
)

func BenchmarkPage10k(b *testing.B) {
	evs := sessiontest.AgentTurns(10000)
	for b.Loop() {
		t := BuildTimeline("long", evs)
		_ = t.Page(t.Pages() - 1)
		_ = buildViews(evs, nil, "", false)
	}
}
