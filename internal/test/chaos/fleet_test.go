package chaos

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	port, err := proc.FreePort(0)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// addMember starts a durable process of the fleet (a worker, a scheduler,
// the approver), started again whenever it ends until the fleet stops:
// at once after the suite kills it, shortly after it ended on its own
// (which the summary reports).
func (e *env) addMember(name string, args []string) *proc.Proc {
	e.t.Helper()
	m := proc.New(proc.Config{Name: name, Path: e.bin, Args: args, Env: e.procEnv, Dir: e.dir, Restart: true})
	e.members = append(e.members, m)
	if err := m.Start(); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// stopMembers ends every member at once: SIGTERM, SIGKILL after 10s.
func (e *env) stopMembers() {
	for _, err := range proc.StopAll(10*time.Second, e.members...) {
		e.t.Logf("%v", err)
	}
}

// logLine is the part of a worker's JSON log line the suite reads.
type logLine struct {
	Message string `json:"message"`
	RunID   string `json:"run_id"`
	Step    int    `json:"step"`
	Attempt int    `json:"attempt"`
}

// scanLogs calls fn for every JSON line of the files matching glob, with
// the file and the line's byte offset.
func scanLogs(glob string, fn func(path string, off int64, l logLine)) {
	paths, _ := filepath.Glob(glob)
	fleetcheck.ScanLogs(paths, func(path string, off int64, b []byte) {
		var l logLine
		if json.Unmarshal(b, &l) == nil {
			fn(path, off, l)
		}
	})
}
