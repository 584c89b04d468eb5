package metrics_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every series the alert rules and the dashboard query is one this package
// (or schedulercmd) exports: a renamed metric must not leave an alert that can never fire or
// an empty panel.
func TestRulesAndDashboardUseExportedNames(t *testing.T) {
	exported := map[string]bool{}
	// The scheduler's counters are registered by pkg/schedulercmd, so that a
	// worker binary does not link the scheduler.
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	sources = append(sources, "../schedulercmd/metrics.go")
	declared := regexp.MustCompile(`"(durable_[a-z_]+)"`)
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range declared.FindAllStringSubmatch(string(b), -1) {
			exported[m[1]] = true
		}
	}
	if len(exported) < 20 {
		t.Fatalf("found %d metric names in the package's sources, want the whole set", len(exported))
	}
	used := regexp.MustCompile(`durable_[a-z_]+`)
	for _, f := range []string{"../../deploy/prometheus/durable-alerts.yml", "../../deploy/grafana/durable.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, name := range used.FindAllString(string(b), -1) {
			if strings.HasSuffix(name, "_") {
				continue // a regular-expression prefix (durable_consumer_.*)
			}
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && exported[trimmed] {
					base = trimmed
				}
			}
			if !exported[base] {
				t.Errorf("%s queries %s, which the metrics package does not export", filepath.Base(f), name)
			}
			seen++
		}
		if seen == 0 {
			t.Errorf("%s queries no durable_ series", f)
		}
	}
}
