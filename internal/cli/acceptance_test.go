package cli_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// Usage mistakes are caught before the CLI connects anywhere: the NATS URL
// points at a closed port, so a command that tried would exit 1 instead.
func TestUsageErrorsExit2(t *testing.T) {
	const nowhere = "nats://127.0.0.1:1"
	cases := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "Usage"},
		{"unknown command", []string{"nosuch"}, `unknown command "nosuch"`},
		{"runs without subcommand", []string{"runs", "--nats", nowhere}, "list"},
		{"unknown runs subcommand", []string{"runs", "nosuch", "--nats", nowhere}, `unknown subcommand "nosuch"`},
		{"runs list bogus status", []string{"runs", "list", "--status", "bogus", "--nats", nowhere}, `unknown status "bogus"`},
		{"runs list extra argument", []string{"runs", "list", "extra", "--nats", nowhere}, `unexpected argument "extra"`},
		{"runs show without run", []string{"runs", "show", "--nats", nowhere}, "RUN"},
		{"runs show two runs", []string{"runs", "show", "a", "b", "--nats", nowhere}, "RUN"},
		{"runs cancel without run", []string{"runs", "cancel", "--nats", nowhere}, "RUN"},
		{"start without workflow", []string{"start", "--id", "x", "--nats", nowhere}, "WORKFLOW"},
		{"start two workflows", []string{"start", "claim", "other", "--id", "x", "--nats", nowhere}, "WORKFLOW"},
		{"start without id", []string{"start", "claim", "--nats", nowhere}, "--id"},
		{"start with empty id", []string{"start", "claim", "--id", "", "--nats", nowhere}, "--id"},
		{"approve without run", []string{"approve", "--by", "ana", "--nats", nowhere}, "RUN"},
		{"approve without by", []string{"approve", "claim-1", "--nats", nowhere}, "--by"},
		{"approve with blank by", []string{"approve", "claim-1", "--by", "  ", "--nats", nowhere}, "--by"},
		{"dev extra argument", []string{"dev", "extra"}, `unexpected argument "extra"`},
		{"dev too many workers", []string{"dev", "--workers", "65"}, "--workers"},
		{"help flag", []string{"start", "-h"}, "-id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(tc.args...)
			if r.code != 2 {
				t.Fatalf("durable %q: want exit 2, got %s", tc.args, r)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("durable %q: stderr does not mention %q:\n%s", tc.args, tc.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("durable %q: wrote to stdout on a usage error:\n%s", tc.args, r.stdout)
			}
		})
	}
}

func TestUnknownFlagExits2(t *testing.T) {
	for _, args := range [][]string{
		{"start", "claim", "--id", "x", "--bogus"},
		{"runs", "list", "--json=maybe"},
		{"approve", "claim-1", "--by", "ana", "--nope"},
		{"dev", "--workers", "many"},
	} {
		r := runCLI(append(args, "--nats", "nats://127.0.0.1:1")...)
		if r.code != 2 {
			t.Errorf("durable %q: want exit 2 (usage), got %s", args, r)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		r := runCLI(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "durable start WORKFLOW --id RUN") {
			t.Errorf("durable %q: want exit 0 and the usage on stdout, got %s", args, r)
		}
	}
}

// Acceptance: bad input gets a clear error and changes nothing.
func TestStartBadInputChangesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		cases := []struct {
			name string
			args []string
			want []string // each in stderr
		}{
			{"malformed JSON", []string{"start", "claim", "--id", "bad-json", "--input", "{bad"}, []string{"JSON"}},
			{"array input", []string{"start", "claim", "--id", "bad-array", "--input", "[1,2]"}, []string{"JSON object"}},
			{"null input", []string{"start", "claim", "--id", "bad-null", "--input", "null"}, []string{"JSON object"}},
			{"string input", []string{"start", "claim", "--id", "bad-string", "--input", `"x"`}, []string{"JSON object"}},
			{"trailing garbage", []string{"start", "claim", "--id", "bad-trail", "--input", `{"amount": 1} x`}, []string{"JSON"}},
			{"unknown workflow", []string{"start", "nosuch", "--id", "bad-wf"}, []string{`"nosuch"`, "unknown workflow", "claim"}},
			{"missing id", []string{"start", "claim"}, []string{"--id"}},
			{"empty id", []string{"start", "claim", "--id", ""}, []string{"--id"}},
			{"id with dot", []string{"start", "claim", "--id", "a.b"}, []string{"run id", "a.b"}},
			{"id with space", []string{"start", "claim", "--id", "a b"}, []string{"run id"}},
			{"id with star", []string{"start", "claim", "--id", "a*"}, []string{"run id"}},
			{"id with gt", []string{"start", "claim", "--id", "a>"}, []string{"run id"}},
			{"non-ASCII id", []string{"start", "claim", "--id", "ünï"}, []string{"run id"}},
			{"129-char id", []string{"start", "claim", "--id", strings.Repeat("x", 129)}, []string{"run id", "128"}},
			// A bad id is reported even when the input is bad too.
			{"bad id and input", []string{"start", "claim", "--id", "a.b", "--input", "{bad"}, []string{"run id"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := e.cli(tc.args...)
				if r.code != 2 {
					t.Fatalf("durable %q: want exit 2, got %s", tc.args, r)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("durable %q: stderr does not mention %q:\n%s", tc.args, w, r.stderr)
					}
				}
			})
		}
		// Nothing was created under any of those ids ...
		for _, id := range []string{"bad-json", "bad-array", "bad-null", "bad-string", "bad-trail", "bad-wf"} {
			if r := e.cli("runs", "show", id); r.code != 3 {
				t.Errorf("runs show %s after a refused start: want exit 3, got %s", id, r)
			}
			if _, err := e.getRun(id); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("run %s: want ErrNotFound, got %v", id, err)
			}
		}
		// An invalid id names no run: show, approve and cancel find nothing
		// and say why.
		for _, id := range []string{"a.b", "a b", "a*", "a>", "ünï", strings.Repeat("x", 129)} {
			for _, args := range [][]string{{"runs", "show", id}, {"approve", id, "--by", "ana"}, {"runs", "cancel", id}} {
				if r := e.cli(args...); (r.code != 2 && r.code != 3) || !strings.Contains(r.stderr, "run id") {
					t.Errorf("durable %q: want exit 2 or 3 explaining the run id, got %s", args, r)
				}
			}
		}
		// ... nor under any other: no run at all and no step message published.
		if l := e.listJSON(); len(l) != 0 {
			t.Errorf("runs list after refused starts: %v", l)
		}
		if r := e.mustCLI(0, "runs", "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("runs list --json with no runs: want [], got %q", r.stdout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.js.Stream(ctx, queue.StepStream)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
			t.Errorf("step stream after refused starts: err %v, %+v", err, info.State)
		}

		// The boundary: 128 characters of the allowed alphabet is a valid id.
		id := strings.Repeat("a", 100) + "-B_0123456789" + strings.Repeat("z", 15)
		if len(id) != 128 {
			t.Fatalf("id has %d chars", len(id))
		}
		e.mustCLI(0, "start", "claim", "--id", id)
		e.waitStatus(id, checkpoint.StatusWaiting)
	})
}

// Starting an existing id with the same input is a no-op that says so; with
// a different input it is refused. Neither restarts or touches the run.
func TestStartDuplicate(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const id = "claim-dup"
		e.startParked(id)
		before, beforeCPs := e.mustRun(id), e.checkpoints(id)
		if len(beforeCPs) != 4 {
			t.Fatalf("parked claim has %d checkpoints, want 4 (steps 1-4)", len(beforeCPs))
		}

		for _, input := range []string{"", "{}", " { } "} {
			args := []string{"start", "claim", "--id", id}
			if input != "" {
				args = append(args, "--input", input)
			}
			r := e.mustCLI(0, args...)
			if !strings.Contains(r.stdout, "already exists") || !strings.Contains(r.stdout, id) {
				t.Errorf("durable %q: want a message that %s already exists, got %s", args, id, r)
			}
			if !strings.Contains(r.stdout, "not restarted") {
				t.Errorf("durable %q: want it to say the run is not restarted, got %s", args, r)
			}
		}
		// Had the duplicate start re-published a step, the worker would
		// have handled it before this later run parks.
		e.barrier("claim-dup-barrier")
		e.assertUnchanged(id, before, beforeCPs)

		r := e.cli("start", "claim", "--id", id, "--input", `{"amount": 5}`)
		if r.code != 1 {
			t.Fatalf("start with the same id and another input: want exit 1, got %s", r)
		}
		if !strings.Contains(r.stderr, id) || !strings.Contains(r.stderr, "different run") || !strings.Contains(r.stderr, "another id") {
			t.Errorf("start with the same id and another input: unclear message:\n%s", r.stderr)
		}
		e.barrier("claim-dup-barrier-2")
		e.assertUnchanged(id, before, beforeCPs)
		if got := e.mustRun(id); string(got.Input) != "{}" {
			t.Errorf("input of %s changed to %s", id, got.Input)
		}

		// A duplicate of a completed run is a no-op as well: no second payment.
		e.mustCLI(0, "approve", id, "--by", "ana")
		e.waitStatus(id, checkpoint.StatusCompleted)
		done, doneCPs := e.mustRun(id), e.checkpoints(id)
		e.mustCLI(0, "start", "claim", "--id", id)
		e.barrier("claim-dup-barrier-3")
		e.assertUnchanged(id, done, doneCPs)
		if ps := e.paymentsFor(id); len(ps) != 1 {
			t.Errorf("payments for %s: want 1, got %+v", id, ps)
		}
	})
}

func TestApproveErrors(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		if r := e.cli("approve", "no-such-run", "--by", "ana"); r.code != 3 || !strings.Contains(r.stderr, "no-such-run") {
			t.Errorf("approve an unknown run: want exit 3 naming it, got %s", r)
		}

		const id = "claim-appr"
		parked := e.startParked(id)
		parkedCPs := e.checkpoints(id)
		for _, args := range [][]string{
			{"approve", id},
			{"approve", id, "--by", ""},
			{"approve", id, "--by", " "},
			{"approve", id, "--reject"},
		} {
			if r := e.cli(args...); r.code != 2 || !strings.Contains(r.stderr, "--by") {
				t.Errorf("durable %q: want exit 2 asking for --by, got %s", args, r)
			}
		}
		e.assertUnchanged(id, parked, parkedCPs)

		// A stale payload hash is refused and leaves the run parked.
		r := e.cli("approve", id, "--by", "ana", "--payload-sha256", strings.Repeat("0", 64))
		if r.code != 1 || !strings.Contains(r.stderr, parked.Wait.PayloadSHA256) {
			t.Errorf("approve with a stale payload hash: want exit 1 naming the pending hash, got %s", r)
		}
		e.assertUnchanged(id, parked, parkedCPs)

		r = e.mustCLI(0, "approve", id, "--by", "ana", "--payload-sha256", parked.Wait.PayloadSHA256)
		if !strings.Contains(r.stdout, "approved") || !strings.Contains(r.stdout, id) {
			t.Errorf("approve: unexpected output %s", r)
		}
		// The run is running (or already done) now: a second decision is refused.
		r = e.cli("approve", id, "--by", "bob")
		if r.code != 1 || !strings.Contains(r.stderr, "not waiting") {
			t.Errorf("second approve: want exit 1 saying the run is not waiting, got %s", r)
		}
		run := e.waitStatus(id, checkpoint.StatusCompleted)
		r = e.cli("approve", id, "--by", "bob", "--reject")
		if r.code != 1 || !strings.Contains(r.stderr, "not waiting") || !strings.Contains(r.stderr, "completed") {
			t.Errorf("approve a completed run: want exit 1 saying it is completed, not waiting, got %s", r)
		}
		run = e.mustRun(id)
		if len(run.Approvals) != 1 || run.Approvals[0].By != "ana" {
			t.Fatalf("approvals of %s: want exactly one by ana, got %+v", id, run.Approvals)
		}
		if ps := e.paymentsFor(id); len(ps) != 1 {
			t.Errorf("payments for %s: want 1, got %+v", id, ps)
		}

		// A run that is running and not parked: with no worker it stays at step 1.
		e.stopWorker()
		const running = "claim-running"
		e.mustCLI(0, "start", "claim", "--id", running)
		before := e.mustRun(running)
		if before.Status != checkpoint.StatusRunning || before.Step != 1 {
			t.Fatalf("run %s: %s at step %d, want running at 1", running, before.Status, before.Step)
		}
		r = e.cli("approve", running, "--by", "ana")
		if r.code != 1 || !strings.Contains(r.stderr, "not waiting") || !strings.Contains(r.stderr, "running") {
			t.Errorf("approve a running run: want exit 1 saying it is running, not waiting, got %s", r)
		}
		e.assertUnchanged(running, before, nil)

		// Cancelling works on a running run too.
		e.mustCLI(0, "runs", "cancel", running)
		if got := e.mustRun(running); got.Status != checkpoint.StatusCancelled {
			t.Errorf("run %s after cancel: %s", running, got.Status)
		}
	})
}

// Rejecting a parked claim fails the run, records who, why and what they
// saw, and pays nothing.
func TestApproveReject(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const id = "claim-rej"
		parked := e.startParked(id)
		r := e.mustCLI(0, "approve", id, "--by", "bob", "--reject", "--reason", "no")
		if !strings.Contains(r.stdout, "rejected") {
			t.Errorf("approve --reject: unexpected output %s", r)
		}
		run := e.waitStatus(id, checkpoint.StatusFailed)
		if !strings.Contains(run.Error, "bob") || !strings.Contains(run.Error, "no") {
			t.Errorf("error of the rejected run: %q", run.Error)
		}
		if len(run.Approvals) != 1 {
			t.Fatalf("approvals: want one, got %+v", run.Approvals)
		}
		a := run.Approvals[0]
		if a.By != "bob" || a.Decision != checkpoint.DecisionRejected || a.Reason != "no" || a.Channel != "cli" ||
			a.PayloadSHA256 != parked.Wait.PayloadSHA256 || a.Step != 5 {
			t.Errorf("recorded decision: %+v (pending hash %s)", a, parked.Wait.PayloadSHA256)
		}
		v := e.showJSON(id)
		if v["status"] != "failed" {
			t.Errorf("runs show --json status %v, want failed", v["status"])
		}
		apps, _ := v["approvals"].([]any)
		if len(apps) != 1 {
			t.Fatalf("runs show --json approvals: %v", v["approvals"])
		}
		ap := apps[0].(map[string]any)
		if ap["decision"] != "rejected" || ap["by"] != "bob" || ap["reason"] != "no" {
			t.Errorf("runs show --json approval: %v", ap)
		}
		if effects, _ := v["effects"].([]any); len(effects) != 0 {
			t.Errorf("rejected run has effects: %v", effects)
		}
		human := e.mustCLI(0, "runs", "show", id)
		if !strings.Contains(human.stdout, "rejected by bob") || !strings.Contains(human.stdout, "reason: no") {
			t.Errorf("runs show does not show the rejection and its reason:\n%s", human.stdout)
		}
		// No step past 5 ran, and no payment was made for the run.
		for _, cp := range e.checkpoints(id) {
			if cp.Step > 5 {
				t.Errorf("rejected run has checkpoint %d (%s)", cp.Step, cp.Name)
			}
		}
		if ps := e.paymentsFor(id); len(ps) != 0 {
			t.Errorf("payments for rejected run %s: %+v", id, ps)
		}
		if r := e.cli("approve", id, "--by", "ana"); r.code != 1 || !strings.Contains(r.stderr, "not waiting") {
			t.Errorf("approve after a rejection: want exit 1, got %s", r)
		}
	})
}

func TestRunsCancel(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		if r := e.cli("runs", "cancel", "no-such-run"); r.code != 3 {
			t.Errorf("cancel an unknown run: want exit 3, got %s", r)
		}
		const id = "claim-cancel"
		e.startParked(id)
		r := e.mustCLI(0, "runs", "cancel", id)
		if !strings.Contains(r.stdout, "cancelled "+id) {
			t.Errorf("runs cancel: unexpected output %s", r)
		}
		run := e.mustRun(id)
		if run.Status != checkpoint.StatusCancelled || run.Wait != nil {
			t.Errorf("run after cancel: status %s wait %+v", run.Status, run.Wait)
		}
		if v := e.showJSON(id); v["status"] != "cancelled" {
			t.Errorf("runs show --json status %v, want cancelled", v["status"])
		}
		cps := e.checkpoints(id)

		r = e.cli("runs", "cancel", id)
		if r.code != 1 || !strings.Contains(r.stderr, "cancelled") {
			t.Errorf("cancel twice: want exit 1 saying it is cancelled, got %s", r)
		}
		r = e.cli("approve", id, "--by", "ana")
		if r.code != 1 || !strings.Contains(r.stderr, "not waiting") {
			t.Errorf("approve a cancelled run: want exit 1, got %s", r)
		}
		e.barrier("claim-cancel-barrier")
		e.assertUnchanged(id, run, cps)
		if ps := e.paymentsFor(id); len(ps) != 0 {
			t.Errorf("payments for cancelled run: %+v", ps)
		}
		if l := e.listJSON("--status", "cancelled"); len(l) != 1 || l[0]["run_id"] != id {
			t.Errorf("runs list --status cancelled: %v", l)
		}
	})
}

// Concurrent starts of one id create one run; concurrent approvals of one
// parked run record one decision. Both stores resolve the race themselves.
func TestConcurrentStartAndApprove(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const id, n = "claim-race", 6
		results := make([]result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { results[i] = e.cli("start", "claim", "--id", id) })
		}
		wg.Wait()
		started := 0
		for _, r := range results {
			if r.code != 0 {
				t.Fatalf("concurrent start: %s", r)
			}
			if strings.HasPrefix(r.stdout, "started ") {
				started++
			} else if !strings.Contains(r.stdout, "already exists") {
				t.Errorf("concurrent start: unexpected output %s", r)
			}
		}
		if started != 1 {
			t.Errorf("%d of %d concurrent starts said they started the run, want 1", started, n)
		}
		e.waitStatus(id, checkpoint.StatusWaiting)
		e.barrier("claim-race-barrier")
		for _, cp := range e.checkpoints(id) {
			if cp.Step > 4 {
				t.Errorf("parked run has checkpoint %d", cp.Step)
			}
		}

		for i := range n {
			wg.Go(func() { results[i] = e.cli("approve", id, "--by", fmt.Sprintf("adj-%d", i)) })
		}
		wg.Wait()
		winner := ""
		for i, r := range results {
			switch {
			case r.code == 0:
				if winner != "" {
					t.Errorf("two approvals succeeded: %s and adj-%d", winner, i)
				}
				winner = fmt.Sprintf("adj-%d", i)
			case r.code != 1 || !strings.Contains(r.stderr, "not waiting"):
				t.Errorf("losing concurrent approve: want exit 1 saying not waiting, got %s", r)
			}
		}
		run := e.waitStatus(id, checkpoint.StatusCompleted)
		if len(run.Approvals) != 1 || run.Approvals[0].By != winner {
			t.Errorf("approvals after a race won by %s: %+v", winner, run.Approvals)
		}
		if ps := e.paymentsFor(id); len(ps) != 1 {
			t.Errorf("payments: want 1, got %+v", ps)
		}
	})
}

// A store that can't be reached is a clear error that hides credentials.
func TestRedisUnreachable(t *testing.T) {
	t.Setenv("DURABLE_REDIS_URL", "")
	n := testenv.StartNATS(t)
	// go-redis retries a refused dial for ~1.7s, so one command per
	// unreachable server.
	// An unreachable server is a failure (1); a URL that can't be parsed
	// is bad usage (2).
	cases := []struct {
		redis, want string
		code        int
		cmds        [][]string
	}{
		{"redis://user:s3cret@127.0.0.1:1/0", "connect to Redis at redis://***@127.0.0.1:1/0", 1, [][]string{{"start", "claim", "--id", "x"}}},
		{"unix://" + t.TempDir() + "/nosuch.sock", "connect to Redis", 1, [][]string{{"runs", "list"}}},
		{"notaurl", "redis URL", 2, [][]string{{"runs", "list"}, {"start", "claim", "--id", "x"}, {"approve", "x", "--by", "ana"}}},
	}
	for _, tc := range cases {
		for _, args := range tc.cmds {
			r := runCLI(append(args, "--nats", n.URL, "--redis", tc.redis)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("durable %q --redis %s: want exit %d and %q, got %s", args, tc.redis, tc.code, tc.want, r)
			}
			if strings.Contains(r.stderr, "s3cret") {
				t.Errorf("durable %q: the Redis password leaked: %s", args, r.stderr)
			}
		}
	}
}
