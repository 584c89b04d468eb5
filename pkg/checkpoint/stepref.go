package checkpoint

import "strconv"

// StepRef names a step of a run, or one branch of a fan-out: where a store
// keeps what a worker reads and writes while it runs that step or branch
// (Store.Load, Store.RecordCall, Store.RecordFailure). Each branch has a
// journal and a failure count of its own, apart from its join's.
//
// A branch is named by its fan-out's join: the branches of the fan-out
// that step 3 returned are branches of step 4, AtBranch(4, 1) to
// AtBranch(4, k), and step 4 itself, AtStep(4), is the join that runs
// once they are all in.
type StepRef struct {
	// Step is the step, from 1. For a branch it is the step of the
	// fan-out's join, the step after the one that fanned out, so at
	// least 2: the same n a branch's Checkpoint.Step holds.
	Step int
	// Branch is 0 for the step itself, and i (from 1) for branch i of the
	// fan-out whose join is Step: the same i a branch's Checkpoint.Branch
	// holds.
	Branch int
}

// AtStep names step n of a run.
func AtStep(n int) StepRef { return StepRef{Step: n} }

// AtBranch names branch i (from 1) of the fan-out whose join is step join.
func AtBranch(join, i int) StepRef { return StepRef{Step: join, Branch: i} }

// IsBranch reports whether r names a branch of a fan-out rather than a
// step: whether Branch is anything but 0. A store refuses a branch below 1.
func (r StepRef) IsBranch() bool { return r.Branch != 0 }

// String names r as logs, errors and store keys do: "3" for step 3, "3.2"
// for branch 2 of the fan-out whose join is step 3.
func (r StepRef) String() string {
	if r.Branch == 0 {
		return strconv.Itoa(r.Step)
	}
	return strconv.Itoa(r.Step) + "." + strconv.Itoa(r.Branch)
}
