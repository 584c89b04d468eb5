package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// FanOutBranches is N of the fan-out phase: one run of N branches against
// one run of N steps in line, on the same servers and worker.
const FanOutBranches = 1000

// FanOutWorkMS are the step bodies the phase measures: no work (what the
// engine costs per step or branch), and a 10 ms wait (a model or API
// call's latency, what fan-out is for).
var FanOutWorkMS = []int{0, 10}

// FanOutResult is what the fan-out phase measured on one store.
type FanOutResult struct {
	System   string `json:"system"`
	Branches int    `json:"branches"`
	// WorkMS is what each step or branch body waited.
	WorkMS int `json:"work_ms"`
	// FanOutSeconds: from the start of the bench-fanout run until it was
	// seen completed (its N branches and the join); LinearSeconds the same
	// for the bench-linear run of N steps.
	FanOutSeconds float64 `json:"fanout_s"`
	LinearSeconds float64 `json:"linear_s"`
	// Steps per second: N over each wall time.
	FanOutStepsPerS float64 `json:"fanout_steps_per_s"`
	LinearStepsPerS float64 `json:"linear_steps_per_s"`
	// Speedup is LinearSeconds over FanOutSeconds.
	Speedup float64 `json:"speedup"`
	// VerifiedBranches were read back committed after the run.
	VerifiedBranches int `json:"verified_branches"`
}

// fanOutPollEvery is how often the driver reads a measured run's status.
const fanOutPollEvery = 5 * time.Millisecond

// FanOut runs the fan-out phase on each store of the bench: a worker
// process with the bench-fanout and bench-linear workflows, then one run
// of each, one after the other.
func (b *Bench) FanOut(ctx context.Context) ([]FanOutResult, error) {
	var out []FanOutResult
	for _, sys := range b.systems {
		if sys.mode != ModeDurable {
			continue
		}
		results, err := b.fanOutOn(ctx, sys)
		if err != nil {
			return nil, err
		}
		out = append(out, results...)
	}
	return out, nil
}

// fanOutOn measures sys with each of FanOutWorkMS, on one worker process.
func (b *Bench) fanOutOn(ctx context.Context, sys *system) ([]FanOutResult, error) {
	label := sys.name + " fan-out"
	args := workerArgs(ModeDurable, b.srv.NATSURL, sys.redisURL, b.cfg.Concurrency, b.cfg.WorkerLogLevel, "", "--workload", WorkloadFanOut)
	wp, err := startWorker(ctx, b.cfg.WorkerCommand, args, filepath.Join(b.dir, "worker-"+sys.name+"-fanout.log"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	defer wp.stop(workerGrace)
	var out []FanOutResult
	for _, ms := range FanOutWorkMS {
		res, err := fanOutPair(ctx, sys.client, sys.name, ms)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		b.progress.linef("%-36s %d branches in %.2fs (%.0f steps/s); %d steps in line %.2fs (%.0f steps/s); speedup %.1f×",
			fmt.Sprintf("%s fan-out, %d ms bodies", sys.name, ms), res.Branches, res.FanOutSeconds, res.FanOutStepsPerS, res.Branches, res.LinearSeconds, res.LinearStepsPerS, res.Speedup)
		out = append(out, *res)
	}
	return out, nil
}

// fanOutPair runs one bench-fanout and one bench-linear run of
// FanOutBranches steps whose bodies wait ms, and verifies the branches.
func fanOutPair(ctx context.Context, cl *client.Client, system string, ms int) (*FanOutResult, error) {
	res := &FanOutResult{System: system, Branches: FanOutBranches, WorkMS: ms}
	input, _ := json.Marshal(SpreadState{N: FanOutBranches, WorkMS: ms})
	var err error
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	fanID, lineID := "fanout-"+suffix, "linear-"+suffix
	if res.FanOutSeconds, err = runToEnd(ctx, cl, FanOutWorkflow, fanID, input); err != nil {
		return nil, err
	}
	if res.LinearSeconds, err = runToEnd(ctx, cl, LinearWorkflow, lineID, input); err != nil {
		return nil, err
	}
	done, err := cl.Store().BranchCheckpoints(ctx, fanID, 2, FanOutBranches)
	if err != nil {
		return nil, fmt.Errorf("read branches: %w", err)
	}
	res.VerifiedBranches = len(done)
	if res.VerifiedBranches != FanOutBranches {
		return nil, fmt.Errorf("%d branch checkpoints, want %d", res.VerifiedBranches, FanOutBranches)
	}
	res.FanOutStepsPerS = FanOutBranches / res.FanOutSeconds
	res.LinearStepsPerS = FanOutBranches / res.LinearSeconds
	res.Speedup = res.LinearSeconds / res.FanOutSeconds
	return res, nil
}

// runToEnd starts run id and returns the seconds until it was seen
// completed.
func runToEnd(ctx context.Context, cl *client.Client, workflow, id string, input json.RawMessage) (float64, error) {
	began := time.Now()
	if _, _, err := cl.Start(ctx, client.StartRequest{Workflow: workflow, RunID: id, Input: input, By: "bench"}); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		run, err := cl.Store().GetRun(ctx, id)
		if err != nil {
			return 0, err
		}
		switch {
		case run.Status == checkpoint.StatusCompleted:
			return time.Since(began).Seconds(), nil
		case run.Status.Terminal():
			return 0, fmt.Errorf("run %s ended %s: %s", id, run.Status, run.Error)
		case time.Now().After(deadline):
			return 0, fmt.Errorf("run %s not completed after 5m (at step %d, %s)", id, run.Step, run.Status)
		}
		if err := sleep(ctx, fanOutPollEvery); err != nil {
			return 0, err
		}
	}
}
