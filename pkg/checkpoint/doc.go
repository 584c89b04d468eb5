// Package checkpoint defines the store of runs, step checkpoints and call
// journals, and the Store interface its implementations share:
// redisstore (the fleet default) and kvstore (JetStream KV, no Redis
// needed). Both pass the same conformance suite, checkpointtest.Run.
//
// A worker running step n of a run reads everything it needs in one call,
// and commits the step's output first-writer-wins together with the run's
// new cursor:
//
//	snap, err := store.Load(ctx, runID, checkpoint.AtStep(n))
//	if err != nil {
//		return err
//	}
//	if snap.Current != nil {
//		return nil // step n is done: never run it twice
//	}
//	state := snap.Previous // nil for step 1: start from the run's input
//	// ... run the step from state, journaling calls with store.RecordCall;
//	// when the body fails, count it with store.RecordFailure ...
//	next := snap.Run
//	next.Step, next.StepName = n+1, "assess"
//	_, err = store.Commit(ctx, next, checkpoint.Checkpoint{RunID: runID, Step: n, Name: "intake", State: out})
//	switch {
//	case errors.Is(err, checkpoint.ErrCheckpointExists):
//		// another delivery won: continue with its checkpoint, discard ours
//	case errors.Is(err, checkpoint.ErrConflict):
//		// the run moved (cancelled, parked, redriven): Load again
//	}
//
// A branch of a fan-out is read, journaled and counted the same way, named
// by its fan-out's join: checkpoint.AtBranch(n, i) is branch i of the
// fan-out whose join is step n (see StepRef). Its outcome is written with
// CommitBranch.
//
// Run.Rev is the store's revision of the run record. Every write of a run
// (Commit, UpdateRun) is a compare-and-set on it, so a cancel and a commit
// that read the same revision cannot both land.
package checkpoint
