package upgrade

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// check checks what the fleet did once every run completed: each
// release's worker entered steps, each payment was taken once and no step
// ran twice, the workers logged no trouble, and a run record that the
// old worker rewrote lost redrive_step (as docs/operations.md says).
//
// A SIGKILLed process may have paid, or entered a step, that the other
// worker then pays or enters again: its call was not journaled, its step
// not committed (the provider answers the payment's retry from its key).
// So only what the processes that lived did is counted against the
// steps: each key paid at most once by them, and each step entered at
// most once (twice for a step that parks, then reads its decision, or
// fails, then is redriven).
func (m *mixedFleet) check() {
	m.t.Helper()
	entered := map[string]int{} // steps entered, by role
	paid := map[string]int{}    // payments, by key
	lived := map[string]int{}   // payments and entries of processes not SIGKILLed, by "pay <key>" and "enter <run>:<step>"
	files, err := filepath.Glob(filepath.Join(m.dir, "*.ledger"))
	if err != nil {
		m.t.Fatal(err)
	}
	for _, file := range files {
		pid, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(file), ".ledger"))
		st := m.starts[pid]
		if st == nil {
			m.t.Errorf("%s: the ledger of a worker process the test did not start", file)
			continue
		}
		enters, pays := 0, 0
		for _, line := range strings.Split(strings.TrimSpace(m.ledger(pid)), "\n") {
			what, key, _ := strings.Cut(line, " ")
			if what == "enter" {
				enters++
			} else {
				pays++
				paid[key]++
			}
			if !st.killed {
				lived[line]++
			}
		}
		entered[st.role] += enters
		log := m.workers[st.role].Logs()[st.gen-1]
		m.t.Logf("%s worker, start %d (pid %d, SIGKILLed %t): %d steps entered, %d payments; log %s", st.role, st.gen, pid, st.killed, enters, pays, filepath.Base(log))
		m.checkLog(log)
	}
	for _, role := range []string{roleOld, roleNew} {
		if entered[role] == 0 {
			m.t.Errorf("the %s worker entered no step", role)
		}
	}
	want := m.wantPayments()
	replays := 0
	for key, n := range paid {
		switch {
		case !want[key]:
			m.t.Errorf("payment %s: no step pays with that key (%d times)", key, n)
		case n > 1:
			replays++
		}
	}
	for key := range want {
		if paid[key] == 0 {
			m.t.Errorf("payment %s was not taken", key)
		}
	}
	for line, n := range lived {
		if what, key, _ := strings.Cut(line, " "); n > 1 && !(what == "enter" && n == 2 && reentered(key)) {
			m.t.Errorf("%s: %d times by worker processes that were not killed", line, n)
		}
	}
	m.t.Logf("%d payments taken as wanted (%d of them again after a SIGKILLed worker paid them); steps entered: old worker %d, new worker %d",
		len(want), replays, entered[roleOld], entered[roleNew])
	m.checkRedrives()
}

// reentered says whether the step of "<run>:<step>" runs twice: it parks
// and runs again on its decision or signal, or it fails and runs again
// on its redrive.
func reentered(step string) bool {
	_, name, _ := strings.Cut(step, ":")
	return name == "review" || name == "await" || name == "ask" || name == "fragile"
}

// wantPayments are the keys the runs pay with, each once.
func (m *mixedFleet) wantPayments() map[string]bool {
	keys := map[string]bool{}
	for _, id := range m.runs {
		kind, _, _ := strings.Cut(id, "-")
		switch {
		case strings.HasSuffix(id, "-kid"):
		case kind == "pipe":
			keys[id+":step1:deposit"], keys[id+":step5:settlement"] = true, true
		case kind == "fam":
			keys[id+":step2:settlement"] = true
		default: // appr, sig, nap, flaky
			keys[id+":step1:deposit"], keys[id+":step3:settlement"] = true, true
		}
	}
	return keys
}

// checkRedrives: a redriven run's record keeps the step it was redriven
// at (redrive_step) when this release's worker carried it on, and loses
// it when the old worker did (it rewrites the record without the field).
func (m *mixedFleet) checkRedrives() {
	m.t.Helper()
	for id, by := range m.redrivenBy {
		run := m.f.Get(id)
		want := 2 // mx-flaky's step "fragile"
		if by == roleOld {
			want = 0
		}
		if run.Redrives != 1 || run.RedriveStep != want {
			m.t.Errorf("%s, redriven while the %s worker ran alone: redrives %d, redrive_step %d; want 1 and %d", id, by, run.Redrives, run.RedriveStep, want)
		}
	}
}

// killWarnings are what a worker may log after another was SIGKILLed in
// the middle of a commit (on the KV store, a run record is written after
// its checkpoint).
var killWarnings = []string{"run record rolled forward to its committed checkpoint", "step message ahead of its run; retrying"}

// checkLog fails the test for each warning or error in a worker's log
// but mx-flaky's dead letters and killWarnings: a step one worker cannot
// carry out and releases for the other would go unseen otherwise.
func (m *mixedFleet) checkLog(path string) {
	m.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		m.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		bad := strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) || strings.Contains(line, "panic")
		switch {
		case !bad:
		case strings.Contains(line, `"workflow":"mx-flaky"`) && strings.Contains(line, `"message":"run dead-lettered"`):
		case containsAny(line, killWarnings):
			m.t.Logf("%s: %s", filepath.Base(path), line)
		default:
			m.t.Errorf("%s: %s", filepath.Base(path), line)
		}
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
