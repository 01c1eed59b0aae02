package loggen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Regression fixtures: testdata/regress/NAME.jsonl is a small log written by hand for one mismatch
// the differential test found, and NAME.expected.json is the oracle's output for it
// (node /tmp/oracle/oracle.mjs --all-forks < NAME.jsonl > NAME.expected.json). A NAME containing
// "clocktime" has an event with a non-number time, so repair times are not compared.

func regressFixtures(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "regress", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no fixtures in testdata/regress")
	}
	return files
}

// TestRegressions checks every fixture with session.Inspect (no node needed).
func TestRegressions(t *testing.T) {
	for _, f := range regressFixtures(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		t.Run(name, func(t *testing.T) {
			jsonl, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(f, ".jsonl") + ".expected.json")
			if err != nil {
				t.Fatalf("fixture without oracle output: %v", err)
			}
			got, panicked := inspectJSON(jsonl)
			if panicked != "" {
				t.Fatal(panicked)
			}
			diffs, err := CompareInspect(want, got, CompareOptions{IgnoreRepairTime: strings.Contains(name, "clocktime")})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("%s: %s", f, d)
			}
		})
	}
}

// TestRegressionFixturesAreOracleOutput checks that each NAME.expected.json is still what the
// oracle prints for NAME.jsonl (one oracle run over a copy of the fixtures).
func TestRegressionFixturesAreOracleOutput(t *testing.T) {
	oracle := oracleOrSkip(t)
	dir := t.TempDir()
	files := regressFixtures(t)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := RunOracleDir(oracle, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		fresh, err := os.ReadFile(filepath.Join(dir, name+".expected.json"))
		if err != nil {
			t.Fatal(err)
		}
		stored, err := os.ReadFile(strings.TrimSuffix(f, ".jsonl") + ".expected.json")
		if err != nil {
			t.Fatal(err)
		}
		diffs, err := CompareInspect(fresh, stored, CompareOptions{IgnoreRepairTime: strings.Contains(name, "clocktime")})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			t.Errorf("%s.expected.json is stale: %s", name, d)
		}
	}
}
