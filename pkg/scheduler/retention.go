package scheduler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Retention defaults.
const (
	// DefaultRetention is how long the scheduler command keeps an ended
	// run (--retention).
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultTombstoneRetention is how long a purged run's tombstone
	// keeps its id taken (--tombstone-retention).
	DefaultTombstoneRetention = 400 * 24 * time.Hour
	// DefaultPurgeRate bounds the runs one scheduler purges a second: a
	// pace that keeps the purge's load on the store small beside the live
	// work's (docs/performance.md measures both) and still ten times what
	// a fleet finishing 100 runs a second ends.
	DefaultPurgeRate = 1000
	// DefaultPurgeShare is the share of the time a scheduler's purge
	// works: after each chunk of runs it rests four times as long as the
	// chunk took, so that the store serves the live work alone for most
	// of the time (docs/performance.md measures what the purge costs
	// step p50 on both stores).
	DefaultPurgeShare = 0.2
)

// purgeBatch is how many ended runs one pass reads at once; purgeChunk
// how many of them it purges at once, before it rests (see
// Config.PurgeShare).
const (
	purgeBatch = 512
	purgeChunk = 64
)

// purgeParallel bounds the purges under way at once; a purge that never
// rests (PurgeShare 1) takes a whole batch as one chunk.
const purgeParallel = 128

// PurgeResult counts what one Purge pass did.
type PurgeResult struct {
	Purged int // runs purged
	Kept   int // ended before the cutoff but kept: a live parent or child, a dead letter still in the DLQ
	Raced  int // changed or purged by another scheduler while this one read them
}

// Purge purges, in batches, the runs that ended more than
// Config.Retention ago (checkpoint.Retention), until none is left or
// ctx ends, at most Config.PurgeRate a second and working at most
// Config.PurgeShare of the time. It keeps a run whose
// parent is live, one with a live child, and a dead run whose letter is
// still in the dead-letter stream. Several schedulers may purge at once:
// a purge is a compare-and-set on the run's revision, so each run is
// purged once; the others count it as raced.
func (s *Scheduler) Purge(ctx context.Context) PurgeResult {
	var res PurgeResult
	r, ok := s.store.(checkpoint.Retention)
	if !ok || s.cfg.Retention <= 0 {
		return res
	}
	cutoff := s.cfg.Now().Add(-s.cfg.Retention)
	skip := map[string]bool{} // kept this pass: not asked again
	for ctx.Err() == nil {
		runs, err := r.EndedBefore(ctx, cutoff, purgeBatch+len(skip))
		if err != nil {
			s.c.errors.Add(1)
			s.log.Warn().Err(err).Msg("retention: list ended runs")
			return res
		}
		var todo []checkpoint.Run
		for _, run := range runs {
			if !skip[run.ID] {
				todo = append(todo, run)
			}
		}
		if len(todo) == 0 {
			return res
		}
		// Schedulers purging at once read the same oldest runs: each
		// takes them in its own order, so that they mostly purge
		// different runs rather than race for the same ones.
		rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
		size := purgeChunk
		if s.cfg.PurgeShare >= 1 {
			size = len(todo)
		}
		for len(todo) > 0 && ctx.Err() == nil {
			chunk := todo[:min(size, len(todo))]
			todo = todo[len(chunk):]
			began := time.Now()
			s.purgeChunk(ctx, r, chunk, &res, skip)
			s.rest(ctx, len(chunk), time.Since(began))
		}
	}
	return res
}

// purgeChunkTimeout bounds a chunk's purges once ctx has ended.
const purgeChunkTimeout = 30 * time.Second

// purgeChunk purges runs at once, counting each outcome in res; a run
// kept, or whose purge failed, goes in skip. The chunk is finished when
// ctx ends meanwhile (within purgeChunkTimeout): a scheduler that stops
// leaves no purge half done for the next pass to find.
func (s *Scheduler) purgeChunk(ctx context.Context, r checkpoint.Retention, runs []checkpoint.Run, res *PurgeResult, skip map[string]bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), purgeChunkTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, purgeParallel)
	for _, run := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outcome := s.purgeOne(ctx, r, run)
			mu.Lock()
			defer mu.Unlock()
			switch outcome {
			case purged:
				res.Purged++
				s.c.purged.Add(1)
			case kept:
				res.Kept++
				skip[run.ID] = true
			case raced:
				res.Raced++
			case failed:
				skip[run.ID] = true
			}
		})
	}
	wg.Wait()
}

// rest paces the purge after a chunk of n runs that took took: it works
// at most Config.PurgeShare of the time, and purges no more than
// Config.PurgeRate runs a second.
func (s *Scheduler) rest(ctx context.Context, n int, took time.Duration) {
	byShare := time.Duration(float64(took) * (1 - s.cfg.PurgeShare) / s.cfg.PurgeShare)
	byRate := time.Duration(n)*time.Second/time.Duration(s.cfg.PurgeRate) - took
	wait := max(byShare, byRate)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

type purgeOutcome int

const (
	purged purgeOutcome = iota
	kept
	raced
	failed
)

func (s *Scheduler) purgeOne(ctx context.Context, r checkpoint.Retention, run checkpoint.Run) purgeOutcome {
	if keep, why := s.mustKeep(ctx, run); keep {
		if why != "" {
			s.log.Debug().Str("run_id", run.ID).Str("why", why).Msg("retention: ended run kept")
		}
		return kept
	}
	if s.cfg.Archive != nil {
		if _, err := s.cfg.Client.Archive(ctx, s.cfg.Archive, run.ID); err != nil {
			if errors.Is(err, checkpoint.ErrNotFound) {
				return raced // purged by another scheduler meanwhile
			}
			if ctx.Err() == nil {
				s.c.errors.Add(1)
				s.log.Warn().Err(err).Str("run_id", run.ID).Msg("retention: archive (the run is kept)")
			}
			return failed
		}
		s.c.archived.Add(1)
	}
	err := r.Purge(ctx, run, s.cfg.TombstoneRetention)
	switch {
	case err == nil:
		return purged
	case errors.Is(err, checkpoint.ErrConflict), errors.Is(err, checkpoint.ErrNotFound):
		return raced
	}
	if ctx.Err() == nil {
		s.c.errors.Add(1)
		s.log.Warn().Err(err).Str("run_id", run.ID).Msg("retention: purge")
	}
	return failed
}

// mustKeep says whether an ended run must stay, and why.
func (s *Scheduler) mustKeep(ctx context.Context, run checkpoint.Run) (bool, string) {
	if run.Parent != nil {
		parent, err := s.store.GetRun(ctx, run.Parent.RunID)
		if err == nil && !parent.Status.Terminal() {
			return true, "its parent " + parent.ID + " is " + string(parent.Status)
		}
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			return true, ""
		}
		// A dead parent still in the dead-letter stream may be redriven
		// and read its children's results again.
		if err == nil {
			if keep, _ := s.inDeadLetters(ctx, parent); keep {
				return true, "its parent " + parent.ID + " is dead and may be redriven"
			}
		}
	}
	// A parent waits for its children (StartChildren parks it until
	// every one has ended), so only a cancel, whose cascade to the
	// children may have failed, ends a parent beside live children.
	if run.Status != checkpoint.StatusCancelled {
		return s.inDeadLetters(ctx, run)
	}
	cps, err := s.store.Checkpoints(ctx, run.ID)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return false, "" // purged by another scheduler: Purge says so
	}
	if err != nil {
		return true, ""
	}
	for _, cp := range cps {
		for _, ch := range cp.Children {
			child, err := s.store.GetRun(ctx, ch.ID)
			if err == nil && !child.Status.Terminal() {
				return true, "its child " + child.ID + " is " + string(child.Status)
			}
			if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
				return true, ""
			}
		}
	}
	return false, ""
}

// inDeadLetters keeps a dead run whose letter is still in the
// dead-letter stream: an operator may redrive it.
func (s *Scheduler) inDeadLetters(ctx context.Context, run checkpoint.Run) (bool, string) {
	if run.Status != checkpoint.StatusDead {
		return false, ""
	}
	in, err := s.cfg.Client.InDeadLetters(ctx, run)
	if err != nil || in {
		return true, "its dead letter is in the dead-letter stream"
	}
	return false, ""
}
