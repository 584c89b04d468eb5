package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var builds sync.Map // package path -> *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds the Go main package pkg (without -race: the processes are
// the system under test, not the test) once per test binary and returns
// its path. The file lives in a temp dir shared by the test binary's
// tests, named after the test binary's process: a test binary cannot
// remove it as it exits (go test has no hook for that), so the next one
// removes the dirs of test binaries that have exited (76 MB each).
func Binary(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		removeStaleBins()
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", binPrefix, os.Getpid()))
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// DurableBin is cmd/durable, built once per test binary.
func DurableBin(tb testing.TB) string {
	tb.Helper()
	return Binary(tb, "github.com/durable-run/durable/cmd/durable")
}

// binPrefix begins the names of the temp dirs of Binary, followed by the
// pid of the test binary that made them.
const binPrefix = "durable-test-bin-"

// removeStaleBins removes the temp dirs of Binary whose test binary has
// exited (no process of its pid; one whose pid was reused stays until
// the next time).
func removeStaleBins() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, named := strings.Cut(strings.TrimPrefix(filepath.Base(dir), binPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !named || err != nil {
			continue // not named by a pid: not ours to judge
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(dir)
		}
	}
}
