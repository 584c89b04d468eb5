package metrics_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAlertRules runs promtool over deploy/prometheus: the rules parse
// (check rules) and every alert fires on its synthetic series (test rules).
func TestAlertRules(t *testing.T) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found on PATH under CI: `make deps` installs it (Debian package prometheus)")
		}
		t.Skip("promtool not found on PATH: run `make deps` (as root it installs the Debian package prometheus) or `sudo apt-get install prometheus`")
	}
	dir := filepath.Join("..", "..", "deploy", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "durable-alerts.yml"},
		{"test", "rules", "durable-alerts.test.yml"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
		t.Logf("promtool %v:\n%s", args, out)
	}
}
