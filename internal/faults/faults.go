// Package faults injects crashes at named points of the step protocol, for
// the crash tests and `durable demo`. Syntax (env DURABLE_CRASH):
//
//	claim-0042:7,claim-0043:6:after-effect,claim-0044:6:hang
//
// run:step[:point], or run:step.branch[:point] for branch i of the
// fan-out joined at step (fanout-1:2.5:after-effect), point one of before (default; the step body has not
// run), after-effect (a call returned, before it is journaled),
// after-record (a call's result is journaled, before the checkpoint),
// after-checkpoint (committed, before publishing the next step),
// after-publish (published, before the ack), hang (block the step
// without heartbeats until the process is killed) and stop (the process
// SIGSTOPs itself before the step body: a zombie once it is continued). A
// fault fires on the first delivery of the step only, so the redelivery
// recovers.
package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/worker"
)

// Points of the step protocol where a crash can be injected.
const (
	Before          = "before"
	AfterEffect     = "after-effect"
	AfterRecord     = "after-record"
	AfterCheckpoint = "after-checkpoint"
	AfterPublish    = "after-publish"
	Hang            = "hang"
	Stop            = "stop"
)

type key struct {
	run          string
	step, branch int
}

// Injector holds parsed crash points. The zero value and nil inject nothing.
type Injector struct {
	points map[key]string
	// Kill ends the process; replaced in tests of this package.
	Kill func()
	// OnHang blocks for a hang fault; by default forever.
	OnHang func()
	// OnStop replaces the SIGSTOP of a stop fault, in tests of this package.
	OnStop func()
}

// Parse reads the DURABLE_CRASH syntax. An empty spec gives nil.
func Parse(spec string) (*Injector, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	in := &Injector{points: map[key]string{}}
	for _, item := range strings.Split(spec, ",") {
		parts := strings.Split(strings.TrimSpace(item), ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("crash spec %q: want run:step[:point]", item)
		}
		// A run that can be no run id, or a run:step named twice, is a
		// fault that never fires: refuse it rather than let a crash test
		// pass without its crash.
		if err := queue.ValidateRunID(parts[0]); err != nil {
			return nil, fmt.Errorf("crash spec %q: %w", item, err)
		}
		at, err := parseAt(parts[1])
		if err != nil {
			return nil, fmt.Errorf("crash spec %q: %w", item, err)
		}
		at.run = parts[0]
		point := Before
		if len(parts) == 3 {
			point = parts[2]
		}
		switch point {
		case Before, AfterEffect, AfterRecord, AfterCheckpoint, AfterPublish, Hang, Stop:
		default:
			return nil, fmt.Errorf("crash spec %q: unknown point %q (before, after-effect, after-record, after-checkpoint, after-publish, hang, stop)", item, point)
		}
		if _, dup := in.points[at]; dup {
			return nil, fmt.Errorf("crash spec %q: %s:%s has a fault already: one per step", item, parts[0], parts[1])
		}
		in.points[at] = point
	}
	return in, nil
}

// parseAt reads "n" (step n) or "n.i" (branch i of the fan-out joined at n).
func parseAt(s string) (key, error) {
	stepPart, branchPart, isBranch := strings.Cut(s, ".")
	n, err := strconv.Atoi(stepPart)
	if err != nil || n < 1 {
		return key{}, fmt.Errorf("step %q must be a positive number, or step.branch", s)
	}
	k := key{step: n}
	if isBranch {
		if k.branch, err = strconv.Atoi(branchPart); err != nil || k.branch < 1 {
			return key{}, fmt.Errorf("branch of %q must be a positive number", s)
		}
	}
	return k, nil
}

// Hooks returns the worker hooks that inject the faults of spec (the
// DURABLE_CRASH syntax): none for an empty spec, so a worker without
// faults pays nothing for them.
func Hooks(spec string) ([]worker.Hook, error) {
	in, err := Parse(spec)
	if in == nil || err != nil {
		return nil, err
	}
	return []worker.Hook{in}, nil
}

// boundaries maps each point to the worker boundary where it fires. A hang
// fires on receipt, before the worker starts heartbeating the delivery,
// so that the step looks hung to the server.
var boundaries = map[string]worker.Boundary{
	Before: worker.BeforeStep, Stop: worker.BeforeStep, Hang: worker.Received,
	AfterEffect: worker.AfterCall, AfterRecord: worker.AfterRecord,
	AfterCheckpoint: worker.AfterCheckpoint, AfterPublish: worker.AfterPublish,
}

// At is the worker hook: it crashes, hangs or stops the process if a fault
// is set for the delivery's run and step at boundary b and this is the
// step's first delivery.
func (in *Injector) At(_ context.Context, b worker.Boundary, d worker.Delivery) {
	if in == nil || d.Attempt != 1 {
		return
	}
	point, ok := in.points[key{d.RunID, d.Step, d.Branch}]
	if !ok || boundaries[point] != b {
		return
	}
	step := strconv.Itoa(d.Step)
	if d.Branch > 0 {
		step += "." + strconv.Itoa(d.Branch)
	}
	in.fire(d.RunID, step, point)
}

func (in *Injector) fire(run, step string, point string) {
	if point == Hang {
		// Tests find the hung process by this line.
		fmt.Fprintf(os.Stderr, "durable-fault: hang run=%s step=%s pid=%d\n", run, step, os.Getpid())
		if in.OnHang != nil {
			in.OnHang()
			return
		}
		select {}
	}
	if point == Stop {
		fmt.Fprintf(os.Stderr, "durable-fault: stop run=%s step=%s pid=%d\n", run, step, os.Getpid())
		if in.OnStop != nil {
			in.OnStop()
			return
		}
		// Freeze like a VM pause or a GC stall: the ack wait runs out and
		// another worker takes the step; SIGCONT makes this one a zombie.
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		return
	}
	fmt.Fprintf(os.Stderr, "durable-fault: crash run=%s step=%s point=%s pid=%d\n", run, step, point, os.Getpid())
	if in.Kill != nil {
		in.Kill()
		return
	}
	// SIGKILL ourselves: no deferred functions, no flushing, like an OOM kill.
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
