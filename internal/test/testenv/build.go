package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
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
// its path. The file lives in a temp dir shared by the test binary's tests.
func Binary(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "durable-test-bin-")
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
