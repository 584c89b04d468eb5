package cli_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// workerProcs runs `durable worker` as a separate process against e, with
// crash injection, and starts it again whenever it dies, like a
// supervisor would. Stopped at cleanup.
type workerProcs struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	exits   []int
	done    chan struct{}
}

func (e *env) superviseWorker(crash string) *workerProcs {
	e.t.Helper()
	bin := testenv.DurableBin(e.t)
	args := []string{"worker", "--nats", e.natsURL, "--ack-wait", "2s", "--concurrency", "4"}
	if e.redisURL != "" {
		args = append(args, "--redis", e.redisURL)
	}
	p := &workerProcs{done: make(chan struct{})}
	logf, err := os.Create(e.t.TempDir() + "/worker.log")
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		for {
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "DURABLE_CRASH="+crash)
			cmd.Stdout, cmd.Stderr = logf, logf
			p.mu.Lock()
			if p.stopped {
				p.mu.Unlock()
				return
			}
			if err := cmd.Start(); err != nil {
				p.mu.Unlock()
				return
			}
			p.cmd = cmd
			p.mu.Unlock()
			_ = cmd.Wait()
			p.mu.Lock()
			p.exits = append(p.exits, cmd.ProcessState.ExitCode())
			p.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() {
		p.mu.Lock()
		p.stopped = true
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		p.mu.Unlock()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.mu.Lock()
			_ = p.cmd.Process.Kill()
			p.mu.Unlock()
			<-p.done
		}
		_ = logf.Close()
		if e.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			e.t.Logf("worker log:\n%s", b)
		}
	})
	return p
}

func (p *workerProcs) crashes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.exits {
		if c != 0 {
			n++
		}
	}
	return n
}

// A claim whose worker is killed after paying, before it journals the
// payment: `runs show` tells the story, in text and JSON. Then `stats`
// reports the fleet's signals for that run and a scripted set of others.
func TestRunsShowCrashedClaimAndStats(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const id = "claim-crash"
		parked := e.startParked(id)
		hash := parked.Wait.PayloadSHA256
		// From here only a worker process with the crash point takes steps.
		e.stopWorker()
		procs := e.superviseWorker(id + ":6:after-effect")
		e.mustCLI(0, "approve", id, "--by", "ana", "--reason", "photos match")
		e.waitStatus(id, checkpoint.StatusCompleted)
		if n := procs.crashes(); n != 1 {
			t.Fatalf("worker crashed %d times, want 1", n)
		}
		if ps := e.paymentsFor(id); len(ps) != 1 || ps[0].Requests != 2 {
			t.Fatalf("payments of %s: %+v, want one paid, its key presented twice", id, ps)
		}

		v := e.showJSON(id)
		cps, _ := v["checkpoints"].([]any)
		if len(cps) != 9 {
			t.Fatalf("checkpoints: %v", v["checkpoints"])
		}
		for i, raw := range cps {
			cp := raw.(map[string]any)
			wantAttempt, wantResumed := 1.0, false
			if i+1 == 6 {
				wantAttempt, wantResumed = 2, true
			}
			if cp["attempt"] != wantAttempt || cp["resumed"] != wantResumed {
				t.Errorf("checkpoint %d: attempt %v resumed %v, want %v %v", i+1, cp["attempt"], cp["resumed"], wantAttempt, wantResumed)
			}
			if _, ok := cp["duration_ms"].(float64); !ok {
				t.Errorf("checkpoint %d: duration_ms %v", i+1, cp["duration_ms"])
			}
		}
		pay := cps[5].(map[string]any)
		if effs, _ := pay["effects"].([]any); len(effs) != 1 || effs[0].(map[string]any)["key"] != id+":step6" || effs[0].(map[string]any)["replayed"] != true {
			t.Errorf("step 6 effects: %v, want %s:step6 replayed", pay["effects"], id)
		}
		if effs, _ := v["effects"].([]any); len(effs) != 1 || effs[0].(map[string]any)["replayed"] != true {
			t.Errorf("effects: %v, want one replayed", v["effects"])
		}
		apps, _ := v["approvals"].([]any)
		if len(apps) != 1 {
			t.Fatalf("approvals: %v", v["approvals"])
		}
		if ap := apps[0].(map[string]any); ap["by"] != "ana" || ap["payload_sha256"] != hash || ap["channel"] != "cli" || ap["decision"] != "approved" {
			t.Errorf("approval %v, want by ana, payload_sha256 %s", ap, hash)
		}
		// The timeline: steps 1-4, parked, decision, steps 5-9, in time order.
		var kinds []string
		var last time.Time
		for _, raw := range v["timeline"].([]any) {
			te := raw.(map[string]any)
			kind := te["kind"].(string)
			if kind == client.TimelineStep {
				kind = te["checkpoint"].(map[string]any)["name"].(string)
			}
			kinds = append(kinds, kind)
			at, err := time.Parse(time.RFC3339Nano, te["at"].(string))
			if err != nil || at.Before(last) {
				t.Errorf("timeline entry %v out of order (after %s)", te, last)
			}
			last = at
		}
		want := []string{"receive", "verify-policy", "assess-damage", "set-amount", "parked", "decision", "approve-payout", "pay", "notify", "close", "archive"}
		if !slices.Equal(kinds, want) {
			t.Errorf("timeline %v, want %v", kinds, want)
		}

		text := e.mustCLI(0, "runs", "show", id).stdout
		var payLine string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, " pay ") && strings.Contains(l, "2 resumed") {
				payLine = l
			}
		}
		if !strings.Contains(payLine, "effect "+id+":step6 REPLAYED") || !strings.Contains(payLine, "worker crashed") {
			t.Errorf("runs show: step 6 line %q lacks the resumed attempt and the replayed effect:\n%s", payLine, text)
		}
		for _, s := range []string{"TIMELINE", "PARKED", "DECISION", "approved by ana via cli", "payload sha256 " + hash, "reason: photos match", "replayed=true"} {
			if !strings.Contains(text, s) {
				t.Errorf("runs show lacks %q:\n%s", s, text)
			}
		}

		// The rest of the scripted fleet.
		e.mustCLI(0, "start", "claim", "--id", "claim-small", "--input", `{"amount": 500}`)
		e.waitStatus("claim-small", checkpoint.StatusCompleted)
		e.mustCLI(0, "start", "claim", "--id", "claim-ttl", "--input", `{"approval_ttl": "1ms"}`)
		e.waitStatus("claim-ttl", checkpoint.StatusWaiting)
		scriptRuns(t, e)

		st := statsJSON(t, e)
		if st.Runs != 7 {
			t.Errorf("runs %d, want 7", st.Runs)
		}
		wantStatus := map[checkpoint.Status]int{"completed": 4, "waiting": 1, "running": 1, "dead": 1, "failed": 0, "cancelled": 0}
		for s, n := range wantStatus {
			if got, ok := st.ByStatus[s]; !ok || got != n {
				t.Errorf("by_status %s: %d (present %t), want %d", s, got, ok, n)
			}
		}
		d := st.Duplicates
		if d.Effects != 4 || d.Replayed != 1 || d.ReusedKeys != 1 || !slices.Equal(d.ReusedKeyExamples, []string{"shared-key"}) || d.JournalMismatches != 1 {
			t.Errorf("duplicates %+v, want 4 effects, 1 replayed, 1 reused key (shared-key), 1 journal mismatch", d)
		}
		r := st.Resumes
		if r.CompletedRuns != 4 || r.RedeliveredSteps != 1 || r.PerCompletedRun != 0.25 || r.ApprovalResumes != 1 || r.ApprovalResumesPerCompletedRun != 0.25 {
			t.Errorf("resumes %+v, want 1 redelivered step and 1 approval resume over 4 completed runs", r)
		}
		if st.Stuck.Count != 1 || st.Stuck.OldestRun != "stuck-1" || st.PastTTL != 1 {
			t.Errorf("stuck %+v, past TTL %d: want stuck-1 and claim-ttl", st.Stuck, st.PastTTL)
		}
		maxBytes, count := 0, 0
		for _, run := range []string{id, "claim-small", "claim-ttl", "stuck-1", "dead-mismatch", "dup-a", "dup-b"} {
			for _, cp := range e.checkpoints(run) {
				b, _ := json.Marshal(cp)
				maxBytes, count = max(maxBytes, len(b)), count+1
			}
		}
		c := st.Checkpoints
		if c.Count != count || st.Sample.Checkpoints != count || !st.Sample.All || c.MaxBytes != maxBytes || c.P50Bytes <= 0 || c.P50Bytes > c.P95Bytes || c.P95Bytes > c.MaxBytes {
			t.Errorf("checkpoints %+v sample %+v, want %d checkpoints, max %d bytes", c, st.Sample, count, maxBytes)
		}
		if statsJSON(t, e, "--stuck-after", "2h").Stuck.Count != 0 {
			t.Errorf("stats --stuck-after 2h counts a run idle for 1h as stuck")
		}
		// A sample of the two most recently updated runs: dup-b and dup-a.
		if s := statsJSON(t, e, "--sample", "2"); s.Sample.Runs != 2 || s.Sample.All || s.Sample.Checkpoints != 2 || s.Duplicates.ReusedKeys != 1 || s.Runs != 7 {
			t.Errorf("stats --sample 2: %+v %+v", s.Sample, s.Duplicates)
		}
		out := e.mustCLI(0, "stats").stdout
		for _, s := range []string{"7 runs", "reused effect keys   1", "journal mismatches   1", "replayed effects     1 of 4",
			"0.250 resumed steps per completed run", "0.250 resumes (approvals and signals) per completed run [sample]: 1 resume", "oldest stuck-1", "waiting past their TTL: 1", "not measured here"} {
			if !strings.Contains(out, s) {
				t.Errorf("stats lacks %q:\n%s", s, out)
			}
		}
	})
}

func statsJSON(t *testing.T, e *env, args ...string) client.Stats {
	t.Helper()
	r := e.mustCLI(0, append([]string{"stats", "--json"}, args...)...)
	var st client.Stats
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	if math.IsNaN(st.Resumes.PerCompletedRun) {
		t.Fatalf("stats --json: NaN resume rate")
	}
	return st
}

// scriptRuns writes run records a fleet produces rarely, straight into
// the store: a running run whose step message was lost an hour ago
// (stuck), a run dead of a journal mismatch, and two runs whose steps
// committed the same effect key. No step message names them, so no worker
// touches them.
func scriptRuns(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hourAgo := time.Now().UTC().Add(-time.Hour)
	create := func(r checkpoint.Run) checkpoint.Run {
		r.Workflow, r.Version = "claim", 1
		if r.CreatedAt.IsZero() {
			r.CreatedAt = time.Now().UTC()
		}
		r.UpdatedAt = r.CreatedAt
		got, err := e.store.CreateRun(ctx, r)
		if err != nil {
			t.Fatalf("create %s: %v", r.ID, err)
		}
		return got
	}
	create(checkpoint.Run{ID: "stuck-1", Status: checkpoint.StatusRunning, Step: 3, StepName: "assess-damage", CreatedAt: hourAgo})
	create(checkpoint.Run{ID: "dead-mismatch", Status: checkpoint.StatusDead, Step: 6, StepName: "pay",
		Error: "call pay of dead-mismatch:step6: recorded args 0123456789ab, now ba9876543210: journaled call replayed with different arguments"})
	base := time.Now().UTC()
	for i, id := range []string{"dup-a", "dup-b"} {
		run := create(checkpoint.Run{ID: id, Status: checkpoint.StatusRunning, Step: 1, StepName: "receive"})
		// dup-b is the most recently updated run.
		now := base.Add(time.Duration(i+1) * time.Millisecond)
		run.Status, run.UpdatedAt = checkpoint.StatusCompleted, now
		cp := checkpoint.Checkpoint{RunID: id, Step: 1, Name: "receive", State: json.RawMessage(`{}`), Status: checkpoint.StatusCompleted,
			Effects: []checkpoint.Effect{{Key: "shared-key"}}, Attempt: 1, At: now, DurationMS: 1}
		if _, err := e.store.Commit(ctx, run, cp); err != nil {
			t.Fatalf("commit %s: %v", id, err)
		}
	}
}

// Each filter of `runs list`, with a run it matches and one it does not.
func TestRunsListFilters(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		e.startParked("claim-parked") // waiting, deadline in 72h
		e.mustCLI(0, "start", "claim", "--id", "claim-ttl", "--input", `{"approval_ttl": "1ms"}`)
		e.waitStatus("claim-ttl", checkpoint.StatusWaiting) // no scheduler here: stays past its TTL
		scriptRuns(t, e)                                    // stuck-1 (created 1h ago), dead-mismatch, dup-a, dup-b

		ids := func(args ...string) []string {
			t.Helper()
			var out []string
			for _, item := range e.listJSON(args...) {
				out = append(out, item["run_id"].(string))
			}
			slices.Sort(out)
			return out
		}
		all := []string{"claim-parked", "claim-ttl", "dead-mismatch", "dup-a", "dup-b", "stuck-1"}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{nil, all},
			{[]string{"--status", "waiting"}, []string{"claim-parked", "claim-ttl"}},
			{[]string{"--status", "failed"}, nil},
			{[]string{"--workflow", "claim"}, all},
			{[]string{"--workflow", "agentloop"}, nil},
			{[]string{"--older-than", "30m"}, []string{"stuck-1"}},
			{[]string{"--older-than", "2h"}, nil},
			{[]string{"--newer-than", "30m"}, []string{"claim-parked", "claim-ttl", "dead-mismatch", "dup-a", "dup-b"}},
			{[]string{"--newer-than", "30m", "--status", "dead"}, []string{"dead-mismatch"}},
			{[]string{"--past-ttl"}, []string{"claim-ttl"}},
			{[]string{"--past-ttl", "--workflow", "agentloop"}, nil},
			{[]string{"--stuck"}, []string{"stuck-1"}},
			{[]string{"--stuck", "--stuck-after", "2h"}, nil},
			{[]string{"--stuck", "--status", "running"}, []string{"stuck-1"}},
		} {
			if got := ids(tc.args...); !slices.Equal(got, tc.want) {
				t.Errorf("runs list %v: %v, want %v", tc.args, got, tc.want)
			}
		}
		for _, item := range e.listJSON("--stuck") {
			if item["stuck"] != true || item["status"] != "running" {
				t.Errorf("runs list --stuck --json item %v: want stuck true", item)
			}
		}
		for _, item := range e.listJSON("--past-ttl") {
			if item["past_ttl"] != true || item["wait_deadline"] == nil {
				t.Errorf("runs list --past-ttl --json item %v: want past_ttl and wait_deadline", item)
			}
		}
		text := e.mustCLI(0, "runs", "list").stdout
		for _, s := range []string{"stuck: no commit for 1h", "past its TTL by", "error: call pay of dead-mismatch:step6", "journaled call replayed"} {
			if !strings.Contains(text, s) {
				t.Errorf("runs list lacks %q:\n%s", s, text)
			}
		}
	})
}

// Mistakes on the command line exit 2 and say what was wrong; an unknown
// run exits 3. Checked before anything is read.
func TestRunsListStatsBadInput(t *testing.T) {
	e := newEnv(t, "kv")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"runs", "list", "--status", "bogus"}, 2, `unknown status "bogus"`},
		{[]string{"runs", "list", "--older-than", "7d"}, 2, "older-than"},
		{[]string{"runs", "list", "--newer-than", "-5m"}, 2, "negative"},
		{[]string{"runs", "list", "--stuck-after", "0s", "--stuck"}, 2, "stuck-after"},
		{[]string{"runs", "list", "--stuck", "--past-ttl"}, 2, "choose one"},
		{[]string{"runs", "list", "--stuck", "--status", "waiting"}, 2, "stuck runs are running"},
		{[]string{"runs", "list", "--past-ttl", "--status", "completed"}, 2, "waiting"},
		{[]string{"runs", "list", "extra"}, 2, "unexpected argument"},
		{[]string{"runs", "show", "no-such-run"}, 3, "no-such-run"},
		{[]string{"stats", "--stuck-after", "-1m"}, 2, "stuck-after"},
		{[]string{"stats", "--sample", "lots"}, 2, "sample"},
		{[]string{"stats", "extra"}, 2, "unexpected argument"},
	} {
		r := e.cli(tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.says) || (tc.code == 2 && r.stdout != "") {
			t.Errorf("durable %v: want exit %d saying %q, got %s", tc.args, tc.code, tc.says, r)
		}
	}
	// An empty fleet has figures, not errors or NaN.
	st := statsJSON(t, e)
	if st.Runs != 0 || st.Resumes.PerCompletedRun != 0 || st.Checkpoints.Count != 0 || len(st.ByStatus) != 6 {
		t.Errorf("stats of an empty fleet: %+v", st)
	}
}
