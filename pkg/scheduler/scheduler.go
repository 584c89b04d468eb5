// Package scheduler sweeps what no worker holds: waits whose deadline
// passed (expiry policies, durable timers) and runs that stopped making
// progress. Several replicas run at once safely: each due entry is claimed
// by one of them, and every change is a compare-and-set on the run.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
)

// Config configures a scheduler. Zero values take the defaults documented.
type Config struct {
	// Client applies expiry policies and repairs. Required.
	Client *client.Client
	// Schedules, when set, has the scheduler fire the due schedules
	// (pkg/schedule) at each one's next fire time and at least every
	// ScheduleInterval: several schedulers may fire the same store, each
	// fire starts one run.
	Schedules *schedule.Store
	// ScheduleInterval bounds the wait between two passes over the
	// schedules, so that those another process created, resumed or
	// changed are seen. Default 5s.
	ScheduleInterval time.Duration
	// Interval between sweeps of the deadline index. Default 1s.
	Interval time.Duration
	// Batch is how many due entries one claim takes, handled together: their
	// runs read and changed at once (each a compare-and-set on its own
	// run), their messages published at once, their entries finished in
	// one call. Default 256.
	Batch int
	// Parallel is how many claimed entries are handled at once: a claim
	// takes at most Parallel entries, and Parallel/Batch claims (at least
	// one) are under way at a time. Default 1024.
	Parallel int
	// Lease hides a claimed entry from other schedulers; an entry whose
	// scheduler died is claimed again after it. Default 30s.
	Lease time.Duration
	// RepairInterval between passes over the run records that repair the
	// deadline index and re-publish stuck runs; the first one runs one
	// interval after the start. Default 30s.
	RepairInterval time.Duration
	// StuckAfter: a running run with no progress for this long gets its
	// step message published again. Progress is a change of its record,
	// a branch's commit, or a heartbeat of the worker running its step
	// (every third of the ack wait), so a step that is alive is never
	// published beside itself. It must be above StepTimeout.
	// Default StepTimeout + 5m (15m).
	StuckAfter time.Duration
	// StepTimeout is the longest worker.Config.StepTimeout of the
	// workers: no step runs longer. New refuses a StuckAfter at or below
	// it. Default 10m, the workers' default.
	StepTimeout time.Duration
	// Blobs, with BlobRetention > 0, has the scheduler delete the blobs of
	// runs that ended more than BlobRetention ago (blob.Retention), every
	// BlobRetention/10 (at most hourly). Keep it longer than the time in
	// which you may redrive a dead run: a redriven step cannot read blobs
	// that are gone.
	Blobs         blob.Store
	BlobRetention time.Duration
	// Retention, when positive, has the scheduler purge the runs that
	// ended (completed, failed, cancelled, dead and out of the dead-letter
	// stream) more than Retention ago, each pass of RepairInterval (see
	// Purge). 0 keeps every run. The scheduler command's default is
	// DefaultRetention.
	Retention time.Duration
	// TombstoneRetention is how long a purged run's tombstone keeps its id
	// taken: a start with the id is refused, and an idempotency key
	// derived from it is never presented for another run. Default
	// DefaultTombstoneRetention.
	TombstoneRetention time.Duration
	// PurgeRate bounds the runs purged a second. Default DefaultPurgeRate.
	PurgeRate int
	// PurgeShare is the share of the time the purge works, in (0, 1]:
	// after each chunk of runs it rests (1-PurgeShare)/PurgeShare times
	// as long as the chunk took, whatever the store, so that its load
	// leaves the live work most of the store's time. 1 never rests
	// (PurgeRate still bounds it). Default DefaultPurgeShare.
	PurgeShare float64
	// Archive, when set, has retention write each run to it before
	// purging it (client.Client.Archive: one gzipped JSON document of the
	// run with its checkpoints and audit), so that `durable runs show`
	// still reads it. A run whose archive fails is not purged. Usually
	// the Object Store bucket client.ArchiveBucket.
	Archive blob.Store
	// Logger for structured logs. Default: zerolog's global logger
	// (github.com/rs/zerolog/log.Logger); zerolog.Nop() silences it.
	Logger *zerolog.Logger
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
}

// Stats counts what a scheduler did.
type Stats struct {
	Claimed, Rejected, Escalated, Reminded, Woke, Repaired, Reindexed, Errors int64
	BlobsDeleted, Purged, Archived                                            int64
	// Fires of schedules this scheduler handled, by outcome.
	FiresStarted, FiresSkipped, FiresFailed int64
}

// DefaultStepTimeout is the workers' default step timeout
// (worker.Config.StepTimeout), which Config.StepTimeout defaults to.
const DefaultStepTimeout = 10 * time.Minute

// Scheduler sweeps due waits and stuck runs.
type Scheduler struct {
	cfg   Config
	log   zerolog.Logger
	store checkpoint.Store
	c     struct {
		claimed, rejected, escalated, reminded, woke, repaired, reindexed, errors, blobsDeleted, purged, archived atomic.Int64
		fires                                                                                                     [3]atomic.Int64 // started, skipped, failed
	}
}

// New validates cfg.
func New(cfg Config) (*Scheduler, error) {
	if _, ok := cfg.Archive.(blob.Stater); cfg.Archive != nil && !ok {
		return nil, errors.New("scheduler: Config.Archive must be a blob.Stater, or archived runs cannot be read back")
	}
	if cfg.Client == nil {
		return nil, errors.New("scheduler: Config.Client is required")
	}
	if cfg.BlobRetention > 0 && cfg.Blobs == nil {
		return nil, errors.New("scheduler: Config.BlobRetention needs Config.Blobs")
	}
	if cfg.Interval < 0 || cfg.Batch < 0 || cfg.Parallel < 0 || cfg.BlobRetention < 0 || cfg.Lease < 0 || cfg.RepairInterval < 0 || cfg.StuckAfter < 0 || cfg.ScheduleInterval < 0 {
		return nil, errors.New("scheduler: durations and sizes must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 1024
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.RepairInterval == 0 {
		cfg.RepairInterval = 30 * time.Second
	}
	if cfg.ScheduleInterval == 0 {
		cfg.ScheduleInterval = 5 * time.Second
	}
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = cfg.StepTimeout + 5*time.Minute
	}
	if cfg.StuckAfter <= cfg.StepTimeout {
		return nil, fmt.Errorf("scheduler: stuck after %s is at or below the workers' step timeout %s: a step still running would be published again beside itself; set StuckAfter (--stuck-after) above StepTimeout (--step-timeout, the workers' longest)", cfg.StuckAfter, cfg.StepTimeout)
	}
	if cfg.Retention < 0 || cfg.TombstoneRetention < 0 || cfg.PurgeRate < 0 {
		return nil, errors.New("scheduler: Retention, TombstoneRetention and PurgeRate must not be negative")
	}
	if cfg.TombstoneRetention == 0 {
		cfg.TombstoneRetention = DefaultTombstoneRetention
	}
	if cfg.PurgeRate == 0 {
		cfg.PurgeRate = DefaultPurgeRate
	}
	if cfg.PurgeShare == 0 {
		cfg.PurgeShare = DefaultPurgeShare
	}
	if !(cfg.PurgeShare > 0 && cfg.PurgeShare <= 1) {
		return nil, fmt.Errorf("scheduler: PurgeShare %g: want a share of the time in (0, 1]", cfg.PurgeShare)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Scheduler{cfg: cfg, store: cfg.Client.Store(), log: log.Logger}
	if cfg.Logger != nil {
		s.log = *cfg.Logger
	}
	return s, nil
}

// Stats returns the counters.
func (s *Scheduler) Stats() Stats {
	return Stats{
		Claimed: s.c.claimed.Load(), Rejected: s.c.rejected.Load(), Escalated: s.c.escalated.Load(),
		Reminded: s.c.reminded.Load(), Woke: s.c.woke.Load(), Repaired: s.c.repaired.Load(),
		Reindexed: s.c.reindexed.Load(), Errors: s.c.errors.Load(), BlobsDeleted: s.c.blobsDeleted.Load(), Purged: s.c.purged.Load(),
		Archived:     s.c.archived.Load(),
		FiresStarted: s.c.fires[0].Load(), FiresSkipped: s.c.fires[1].Load(), FiresFailed: s.c.fires[2].Load(),
	}
}

// Run sweeps until ctx ends: at once, then every Interval. The repair
// passes run beside the sweeps, every RepairInterval from one interval
// after the start: a pass reads every active run, and a scheduler started
// on a backlog of expired waits (after an outage) sweeps it first.
func (s *Scheduler) Run(ctx context.Context) error {
	s.log.Info().Dur("interval", s.cfg.Interval).Dur("stuck_after", s.cfg.StuckAfter).Msg("scheduler started")
	var repairs sync.WaitGroup
	repairs.Add(1)
	go func() {
		defer repairs.Done()
		// Repair reads the index: backfill it first, however long
		// the store takes to answer.
		for wait := time.Second; !s.BackfillIndex(ctx, 0) && ctx.Err() == nil; wait = min(2*wait, time.Minute) {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if s.cfg.Retention > 0 {
			if _, ok := s.store.(checkpoint.Retention); !ok {
				s.log.Warn().Dur("retention", s.cfg.Retention).Msg("the checkpoint store cannot purge ended runs: retention is off, every run is kept")
			}
		}
		t := time.NewTicker(s.cfg.RepairInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Runs a process of the previous version wrote during a
			// rolling upgrade: one batch a pass.
			s.BackfillIndex(ctx, 1)
			s.Repair(ctx)
			if res := s.Purge(ctx); res.Purged > 0 || res.Kept > 0 {
				s.log.Info().Int("purged", res.Purged).Int("kept", res.Kept).Int("raced", res.Raced).Dur("retention", s.cfg.Retention).Msg("ended runs purged")
			}
		}
	}()
	if s.cfg.Schedules != nil {
		repairs.Add(1)
		go func() { defer repairs.Done(); s.FireSchedules(ctx) }()
	}
	if s.cfg.BlobRetention > 0 {
		repairs.Add(1)
		go func() {
			defer repairs.Done()
			t := time.NewTicker(min(s.cfg.BlobRetention/10, time.Hour))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				s.SweepBlobs(ctx)
			}
		}()
	}
	sweep := time.NewTicker(s.cfg.Interval)
	defer sweep.Stop()
	for {
		s.Sweep(ctx)
		select {
		case <-ctx.Done():
			repairs.Wait()
			s.log.Info().Msg("scheduler stopped")
			return nil
		case <-sweep.C:
		}
	}
}

// Sweep claims due entries in batches until none is left and applies
// their policies, a batch at a time per claim and Parallel/Batch claims
// under way at once: the next batch is claimed while the last ones are
// handled. It returns how many entries it handled.
func (s *Scheduler) Sweep(ctx context.Context) int {
	limit := min(s.cfg.Batch, s.cfg.Parallel)
	slots := make(chan struct{}, max(1, s.cfg.Parallel/limit))
	var wg sync.WaitGroup
	defer wg.Wait()
	handled := 0
	for ctx.Err() == nil {
		// A slot first, then the claim: a claimed batch's lease runs only
		// while it is handled.
		slots <- struct{}{}
		now := s.cfg.Now()
		ids, err := s.store.ClaimDue(ctx, now, limit, s.cfg.Lease)
		if err != nil || len(ids) == 0 {
			<-slots
			if err != nil {
				s.c.errors.Add(1)
				s.log.Warn().Err(err).Msg("claim due waits")
			}
			return handled
		}
		s.c.claimed.Add(int64(len(ids)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			s.expire(ctx, ids, now)
		}()
		handled += len(ids)
	}
	return handled
}

// expire applies the policies of a batch claimed at now and finishes the
// claims of the entries it is done with, in one call. An entry whose run
// could not be changed, or whose message was not published, stays
// claimed: after the lease another pass (or scheduler) retries it. An
// entry is finished only if it still holds this claim: once the policy
// published a wake or a resume, the step may park the run again and index
// its new deadline before the batch gets here.
func (s *Scheduler) expire(ctx context.Context, ids []string, now time.Time) {
	done := make([]checkpoint.DueNext, 0, len(ids))
	for _, o := range s.cfg.Client.ExpireMany(ctx, ids, now) {
		switch {
		case errors.Is(o.Err, checkpoint.ErrNotFound):
			done = append(done, checkpoint.DueNext{ID: o.ID})
			continue
		case o.Err != nil:
			s.c.errors.Add(1)
			s.log.Warn().Err(o.Err).Str("run_id", o.ID).Msg("apply expiry policy")
			continue
		}
		done = append(done, checkpoint.DueNext{ID: o.ID, Next: o.Next})
		s.count(o)
	}
	if err := s.store.FinishDue(ctx, now.Add(s.cfg.Lease), done...); err != nil {
		s.c.errors.Add(1)
		s.log.Warn().Err(err).Int("entries", len(done)).Msg("update deadline index")
	}
}

// count counts and logs what an expiry did.
func (s *Scheduler) count(o client.ExpireOutcome) {
	switch o.Action {
	case client.ExpireNone:
		return
	case client.ExpireRejected:
		s.c.rejected.Add(1)
	case client.ExpireEscalated:
		s.c.escalated.Add(1)
	case client.ExpireReminded:
		s.c.reminded.Add(1)
	case client.ExpireWoke:
		s.c.woke.Add(1)
	}
	ev := s.log.Info().Str("run_id", o.ID).Str("action", o.Action)
	if !o.Next.IsZero() {
		ev = ev.Time("next", o.Next)
	}
	ev.Msg("wait expired")
}

// SweepBlobs deletes the blobs of runs that ended more than BlobRetention
// ago. Several schedulers may sweep at once: deleting a deleted object is
// no error.
func (s *Scheduler) SweepBlobs(ctx context.Context) {
	res, err := blob.Retention{Blobs: s.cfg.Blobs, Runs: s.store, After: s.cfg.BlobRetention, Now: s.cfg.Now}.Sweep(ctx)
	s.c.blobsDeleted.Add(int64(res.Objects))
	if err != nil {
		s.c.errors.Add(1)
		s.log.Warn().Err(err).Msg("blob retention")
	}
	if res.Objects > 0 {
		s.log.Info().Int("runs", res.Runs).Int("objects", res.Objects).Int64("bytes", res.Bytes).Msg("blobs of ended runs deleted")
	}
}

// backfillBatch is how many runs one BackfillIndex call indexes.
const backfillBatch = 1000

// BackfillIndex indexes the runs a store written before its run index
// holds (checkpoint.IndexBackfill), up to batches calls of backfillBatch
// runs (0: until done), logging its progress. Repair and the listings
// read the index, so a scheduler does this first when it starts; it is
// resumable and idempotent, so several schedulers may do it at once. It
// reports whether the backfill is done.
func (s *Scheduler) BackfillIndex(ctx context.Context, batches int) (done bool) {
	b, ok := s.store.(checkpoint.IndexBackfill)
	if !ok {
		return true
	}
	began, logged, total := time.Now(), time.Now(), 0
	for i := 0; batches == 0 || i < batches; i++ {
		p, err := b.BackfillIndex(ctx, backfillBatch)
		total += p.Indexed
		if err != nil {
			if ctx.Err() == nil {
				s.c.errors.Add(1)
				s.log.Warn().Err(err).Int("indexed", total).Msg("run index backfill failed; it goes on shortly")
			}
			return false
		}
		if p.Done {
			if total > 0 {
				s.log.Info().Int("indexed", total).Dur("took", time.Since(began)).Msg("run index backfilled: runs written before the index are listed again")
			}
			return true
		}
		if time.Since(logged) > 5*time.Second {
			logged = time.Now()
			s.log.Info().Int("indexed", total).Int("remaining", p.Remaining).Msg("run index backfill under way")
		}
	}
	return false
}

// Repair walks the active runs: waiting runs missing from the deadline
// index are indexed (the index is written after the run record, so a crash
// between the two loses it), and running runs with no progress for
// StuckAfter get their step published again, once per stuck state: the
// repair leaves a liveness mark (checkpoint.Liveness), so the same run is
// repaired again only after StuckAfter more without progress.
func (s *Scheduler) Repair(ctx context.Context) {
	now := s.cfg.Now()
	for _, status := range []checkpoint.Status{checkpoint.StatusWaiting, checkpoint.StatusRunning} {
		runs, err := s.store.ListRuns(ctx, checkpoint.Filter{Status: status})
		if err != nil {
			s.c.errors.Add(1)
			s.log.Warn().Err(err).Msg("repair: list runs")
			return
		}
		for _, run := range runs {
			switch {
			case run.Status == checkpoint.StatusWaiting && run.Wait != nil && run.Wait.Kind == checkpoint.WaitChildren:
				// No deadline: its children resume it. One whose last
				// child's resume was lost with a crash is resumed here;
				// one waiting long is given the children it may lack
				// (its step's message lost before they were created).
				if now.Sub(run.Wait.Since) > s.cfg.StuckAfter {
					if err := s.restartChildren(ctx, run); err != nil {
						s.c.errors.Add(1)
						s.log.Warn().Err(err).Str("run_id", run.ID).Msg("repair: start the children of a waiting parent")
					}
				}
				resumed, err := s.cfg.Client.ResumeParent(ctx, run.ID)
				if err != nil {
					s.c.errors.Add(1)
					s.log.Warn().Err(err).Str("run_id", run.ID).Msg("repair: resume a parent of ended children")
				} else if resumed {
					s.c.repaired.Add(1)
					s.log.Warn().Str("run_id", run.ID).Msg("parent of ended child runs was still waiting; resumed")
				}
			case run.Status == checkpoint.StatusWaiting && run.Wait != nil && now.Sub(run.Wait.Deadline) > 2*s.cfg.Lease+s.cfg.Interval:
				// Overdue past any claim's lease: its index entry is lost.
				if err := s.store.IndexDue(ctx, run.ID, run.Wait.Deadline); err == nil {
					s.c.reindexed.Add(1)
					s.log.Warn().Str("run_id", run.ID).Time("deadline", run.Wait.Deadline).Msg("overdue wait was not indexed; indexed again")
				}
			case run.Status == checkpoint.StatusRunning && now.Sub(run.UpdatedAt) > s.cfg.StuckAfter:
				published, err := s.cfg.Client.Repair(ctx, run, now.Add(-s.cfg.StuckAfter))
				if err != nil {
					s.c.errors.Add(1)
					s.log.Warn().Err(err).Str("run_id", run.ID).Msg("repair stuck run")
					continue
				}
				if !published {
					continue // this state was repaired already (by a pass or scheduler before)
				}
				if lv, ok := s.store.(checkpoint.Liveness); ok {
					// The repair ends this stuck state: the next, if no
					// progress follows, is StuckAfter after it.
					if err := lv.MarkAlive(ctx, run.ID, now); err != nil {
						s.log.Warn().Err(err).Str("run_id", run.ID).Msg("repair: mark not written; the state may be repaired again")
					}
				}
				s.c.repaired.Add(1)
				s.log.Warn().Str("run_id", run.ID).Int("step", run.Step).Time("updated_at", run.UpdatedAt).Msg("stuck run: step published again")
			}
		}
	}
}

// restartChildren starts again (idempotent by id) the children a parent
// waits for, as its step's checkpoint lists them.
func (s *Scheduler) restartChildren(ctx context.Context, run checkpoint.Run) error {
	cp, err := s.store.Checkpoint(ctx, run.ID, run.Wait.Step-1)
	if err != nil {
		return err
	}
	return s.cfg.Client.StartChildren(ctx, run, cp)
}
