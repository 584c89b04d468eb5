package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveStaleBins: the temp dir of a test binary that has exited goes;
// this one's, and dirs not named by a pid, stay.
func TestRemoveStaleBins(t *testing.T) {
	mk := func(name string) string {
		dir := filepath.Join(os.TempDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	// Above Linux's largest pid_max (2^22): no process has it.
	stale := mk(fmt.Sprintf("%s%d-test", binPrefix, 1<<22+7))
	mine := mk(fmt.Sprintf("%s%d-test", binPrefix, os.Getpid()))
	unnamed := mk(binPrefix + "123456789")
	removeStaleBins()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dir of an exited test binary is still there: %v", err)
	}
	for _, dir := range []string{mine, unnamed} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was removed: %v", dir, err)
		}
	}
}
