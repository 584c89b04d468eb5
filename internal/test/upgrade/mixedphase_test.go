package upgrade

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// alone SIGKILLs role's worker as it begins a work step of mx-pipeline and
// waits until the other worker takes that step over. With the other
// worker alone, it resumes the runs of batch (1 or 2) that wait or died
// (decides their approvals, sends their signals, redrives them) and waits
// until they complete. Then it starts role's worker again.
func (m *mixedFleet) alone(role string, batch int) {
	m.t.Helper()
	other := roleNew
	if role == roleNew {
		other = roleOld
	}
	s := m.workers[role]
	pid := s.Pid()
	before := len(workEntries(m.ledger(pid)))
	var step string
	testenv.Eventually(m.t, 30*time.Second, "the "+role+" worker begins a work step", func() bool {
		e := workEntries(m.ledger(pid))
		if len(e) > before {
			step = e[len(e)-1]
			return true
		}
		return false
	})
	if err := s.Kill(); err != nil {
		m.t.Fatal(err)
	}
	m.starts[pid].killed = true
	killed := time.Now()
	survivor := m.workers[other].Pid()
	testenv.Eventually(m.t, 30*time.Second, "the "+other+" worker takes over step "+step, func() bool {
		return strings.Contains(m.ledger(survivor), "enter "+step+"\n")
	})
	m.t.Logf("SIGKILLed the %s worker (pid %d) in step %s; the %s worker took the step over %s later", role, pid, step, other, time.Since(killed).Round(10*time.Millisecond))
	m.resume(batch, other)
	m.launch(role)
}

// workEntries are the work steps of mx-pipeline a ledger says were
// entered, in order: "<run>:work<n>". A line being written is left out.
func workEntries(ledger string) []string {
	var steps []string
	lines := strings.Split(ledger, "\n")
	for _, line := range lines[:len(lines)-1] {
		if step, ok := strings.CutPrefix(line, "enter "); ok && strings.Contains(step, ":work") {
			steps = append(steps, step)
		}
	}
	return steps
}

// ledger is what the worker process pid wrote to its ledger so far.
func (m *mixedFleet) ledger(pid int) string {
	b, err := os.ReadFile(filepath.Join(m.dir, strconv.Itoa(pid)+".ledger"))
	if err != nil && !os.IsNotExist(err) {
		m.t.Fatal(err)
	}
	return string(b)
}

// resume decides the approvals of batch's up-approval runs and of its
// mx-family runs' children, signals its up-signal runs and redrives its
// mx-flaky runs (dead: their step refused), each once it waits or died,
// and waits until they complete. Batch 1 is the first half of each, 2
// the second; alone is the worker that runs meanwhile.
func (m *mixedFleet) resume(batch int, alone string) {
	m.t.Helper()
	ctx := context.Background()
	third, half := (batch-1)*3, (batch-1)*2
	var asks []string
	for _, id := range runIDs("fam", half+1, half+2) {
		asks = append(asks, id+"-kid")
	}
	asks = append(asks, runIDs("appr", third+1, third+3)...)
	for _, id := range asks {
		m.f.WaitStatus(id, checkpoint.StatusWaiting, 30*time.Second)
		if _, err := m.f.Client.Decide(ctx, client.Decision{RunID: id, By: "ann", Channel: client.ChannelCLI}); err != nil {
			m.t.Fatalf("decide %s: %v", id, err)
		}
	}
	signals := runIDs("sig", third+1, third+3)
	for _, id := range signals {
		m.f.WaitStatus(id, checkpoint.StatusWaiting, 30*time.Second)
		req := client.SignalRequest{RunID: id, Name: "docs", Data: json.RawMessage(`"scan.pdf"`), By: "bot", Channel: client.ChannelAPI}
		if _, err := m.f.Client.Signal(ctx, req); err != nil {
			m.t.Fatalf("signal %s: %v", id, err)
		}
	}
	redriven := runIDs("flaky", half+1, half+2)
	for _, id := range redriven {
		m.f.WaitStatus(id, checkpoint.StatusDead, 30*time.Second)
		m.refuse(id, false)
		m.redrivenBy[id] = alone
		if _, err := m.f.Client.Redrive(ctx, id, "oncall"); err != nil {
			m.t.Fatalf("redrive %s: %v", id, err)
		}
	}
	done := slices.Concat(asks, signals, redriven, runIDs("fam", half+1, half+2))
	for _, id := range done {
		m.f.WaitStatus(id, checkpoint.StatusCompleted, 30*time.Second)
	}
}
