package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/store"
	"github.com/prometheus/client_golang/prometheus"
)

// metricNames are the names every agentlog collector describes.
func metricNames(t *testing.T) []string {
	t.Helper()
	pub, err := publisher.New(&store.Store{}, nil, publisher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 256)
	te := testnats.Start(t, store.Config{})
	for _, c := range []prometheus.Collector{
		newProjector(t, te, "p").Collector(),
		newForker(t, te).Collector(),
		pub.Collector(),
	} {
		c.Describe(ch)
	}
	close(ch)
	rx := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for d := range ch {
		if m := rx.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// TestDashboard: grafana-agentlog.json is valid JSON, and every agentlog metric its queries name
// exists; the README's operations section lists every metric.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana-agentlog.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana-agentlog.json: %v", err)
	}
	names := metricNames(t)
	if len(names) < 25 {
		t.Fatalf("only %d metrics described: %v", len(names), names)
	}
	rx := regexp.MustCompile(`agentlog_[a-z_]+`)
	hist := regexp.MustCompile(`_(bucket|sum|count)$`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			refs := rx.FindAllString(tg.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("panel %q: query %q names no agentlog metric", p.Title, tg.Expr)
			}
			for _, n := range refs {
				base := hist.ReplaceAllString(n, "")
				if !slices.Contains(names, n) && !slices.Contains(names, base) {
					t.Errorf("panel %q: metric %s does not exist", p.Title, n)
				}
				used[base] = true
				used[n] = true
			}
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !used[n] {
			t.Errorf("metric %s is on no panel", n)
		}
		if !regexp.MustCompile("`" + n + "`").Match(readme) {
			t.Errorf("README.md does not list %s", n)
		}
	}
}

// TestOneRegistry: the collectors of two projectors, a forker and a publisher register in one
// registry, as in `agentlog dev --projectors 2`.
func TestOneRegistry(t *testing.T) {
	pub, err := publisher.New(&store.Store{}, nil, publisher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	te := testnats.Start(t, store.Config{})
	for _, c := range []prometheus.Collector{
		newProjector(t, te, "p1").Collector(),
		newProjector(t, te, "p2").Collector(),
		newForker(t, te).Collector(),
		pub.Collector(),
	} {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// newProjector is a projector over te, not started (its collector describes its metrics).
func newProjector(t *testing.T, te *testnats.Env, name string) *projector.Projector {
	t.Helper()
	p, err := projector.New(te.Store, te.NC, projector.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newForker is a forker over te, not started.
func newForker(t *testing.T, te *testnats.Env) *forker.Forker {
	t.Helper()
	f, err := forker.New(te.Store, te.NC, forker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}
