package kvstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	running   = checkpoint.StatusRunning
	waiting   = checkpoint.StatusWaiting
	completed = checkpoint.StatusCompleted
	failed    = checkpoint.StatusFailed
	dead      = checkpoint.StatusDead
)

// pageIDs pages through q by limit and returns the ids in order; a run
// listed twice fails.
func pageIDs(t *testing.T, s checkpoint.Store, q checkpoint.PageQuery) string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	for range 100 {
		p, err := s.PageRuns(testCtx(t), q)
		if err != nil {
			t.Fatalf("PageRuns(%+v): %v", q, err)
		}
		for _, r := range p.Runs {
			if seen[r.ID] {
				t.Fatalf("PageRuns(%+v) lists %s twice", q, r.ID)
			}
			seen[r.ID] = true
			ids = append(ids, r.ID)
		}
		if p.Next.IsZero() {
			return strings.Join(ids, " ")
		}
		q.After = p.Next
	}
	t.Fatalf("PageRuns(%+v): more than 100 pages", q)
	return ""
}

func listIDs(t *testing.T, s checkpoint.Store, f checkpoint.Filter) string {
	t.Helper()
	runs, err := s.ListRuns(testCtx(t), f)
	if err != nil {
		t.Fatalf("ListRuns(%+v): %v", f, err)
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return strings.Join(ids, " ")
}

// waitCounts waits (5 s at most) for CountRuns to give want per status,
// zeros left out: a removed entry's marker counts until it expires.
func waitCounts(t *testing.T, s checkpoint.Store, what string, want map[checkpoint.Status]int64, wantWF map[string]map[checkpoint.Status]int64) {
	t.Helper()
	var got checkpoint.RunCounts
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if got, err = s.CountRuns(testCtx(t)); err != nil {
			t.Fatalf("%s: CountRuns: %v", what, err)
		}
		maps.DeleteFunc(got.Status, func(_ checkpoint.Status, n int64) bool { return n == 0 })
		if maps.Equal(got.Status, want) && (wantWF == nil || maps.EqualFunc(got.Workflow, wantWF, func(a, b map[checkpoint.Status]int64) bool { return maps.Equal(a, b) })) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: CountRuns = %v %v, want %v %v", what, got.Status, got.Workflow, want, wantWF)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// putLegacy writes run as a version before the index did: the record
// alone, without "_ix" and without index entries.
func putLegacy(t *testing.T, kv jetstream.KeyValue, r checkpoint.Run) {
	t.Helper()
	doc, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testCtx(t), "run."+r.ID, doc); err != nil {
		t.Fatal(err)
	}
}

// A bucket written before the index: BackfillIndex, called in batches
// until Done, indexes every run once, a run that an update indexed
// between two batches included; a second backfill does nothing.
func TestBackfillIndex(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newStore(t, js)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Add(-time.Hour)
	statuses := []checkpoint.Status{running, waiting, completed, dead, failed}
	for i := range 11 {
		putLegacy(t, kv, checkpoint.Run{
			ID: fmt.Sprintf("old-%02d", i), Workflow: []string{"claim", "refund"}[i%2], Status: statuses[i%5], Step: 1,
			CreatedAt: t0.Add(time.Duration(i) * time.Millisecond),
			// Ended later the older they are: the status listings order by it.
			UpdatedAt: t0.Add(time.Duration(20-i) * time.Second),
		})
	}
	if got := pageIDs(t, s, checkpoint.PageQuery{}); got != "" {
		t.Fatalf("PageRuns before the backfill = %q, want none: nothing is indexed", got)
	}
	// old-10 is committed before the backfill begins: the commit indexes it.
	run, err := s.GetRun(ctx, "old-10")
	if err != nil {
		t.Fatal(err)
	}
	next, cp := step1(run, "a")
	if _, err := s.Commit(ctx, next, cp); err != nil {
		t.Fatal(err)
	}

	p, err := s.BackfillIndex(ctx, 3)
	if err != nil || p.Indexed != 3 || p.Done {
		t.Fatalf("first batch: %+v, %v; want 3 indexed, not done", p, err)
	}
	// old-05, not looked at yet, is updated: the update indexes it, and
	// the backfill must not index it again.
	r5, err := s.GetRun(ctx, "old-05")
	if err != nil {
		t.Fatal(err)
	}
	r5.Status = waiting
	if _, err := s.UpdateRun(ctx, r5); err != nil {
		t.Fatal(err)
	}
	indexed := p.Indexed
	for calls := 1; !p.Done; calls++ {
		if calls == 20 {
			t.Fatalf("not done after %d batches: %+v", calls, p)
		}
		if p, err = s.BackfillIndex(ctx, 3); err != nil {
			t.Fatal(err)
		}
		indexed += p.Indexed
	}
	if indexed != 9 {
		t.Fatalf("backfill indexed %d runs, want 9 (11 but the committed and the updated one)", indexed)
	}

	want := "old-10 old-09 old-08 old-07 old-06 old-05 old-04 old-03 old-02 old-01 old-00"
	if got := pageIDs(t, s, checkpoint.PageQuery{Limit: 4}); got != want {
		t.Fatalf("PageRuns after the backfill = %q, want %q", got, want)
	}
	if got := pageIDs(t, s, checkpoint.PageQuery{Workflow: "claim", Limit: 2}); got != "old-10 old-08 old-06 old-04 old-02 old-00" {
		t.Fatalf("PageRuns(claim) after the backfill = %q", got)
	}
	// A backfilled run took its status at its UpdatedAt.
	if got := pageIDs(t, s, checkpoint.PageQuery{Status: completed}); got != "old-02 old-07" {
		t.Fatalf("PageRuns(completed) = %q, want old-02 old-07 (by UpdatedAt)", got)
	}
	for st, want := range map[checkpoint.Status]string{
		running: "old-00 old-10", waiting: "old-01 old-05 old-06", completed: "old-02 old-07",
		dead: "old-03 old-08", failed: "old-04 old-09",
	} {
		if got := listIDs(t, s, checkpoint.Filter{Status: st}); got != want {
			t.Errorf("ListRuns(%s) = %q, want %q", st, got, want)
		}
	}
	waitCounts(t, s, "after the backfill",
		map[checkpoint.Status]int64{running: 2, waiting: 3, completed: 2, dead: 2, failed: 2},
		map[string]map[checkpoint.Status]int64{
			"claim":  {running: 2, waiting: 1, completed: 1, dead: 1, failed: 1},
			"refund": {waiting: 2, completed: 1, dead: 1, failed: 1},
		})

	if p, err := s.BackfillIndex(ctx, 3); err != nil || p.Indexed != 0 || !p.Done {
		t.Fatalf("second backfill: %+v, %v; want nothing indexed, done", p, err)
	}
	other, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := other.BackfillIndex(ctx, 100); err != nil || p.Indexed != 0 || !p.Done {
		t.Fatalf("backfill by another process: %+v, %v; want nothing indexed, done", p, err)
	}
}

// A bucket with no run at all is done at once.
func TestBackfillIndexEmpty(t *testing.T) {
	s, _ := newStore(t, connect(t))
	if p, err := s.BackfillIndex(testCtx(t), 10); err != nil || !p.Done || p.Indexed != 0 {
		t.Fatalf("backfill of an empty bucket: %+v, %v", p, err)
	}
}

// A crash between a two-write update's index entries and its record
// leaves an entry no record names (and its twin in the listing by
// workflow): no listing shows it, and once the record is written again a
// listing removes both. A crash after the record,
// before the markers of its old entries, leaves the run in its old
// status's listing for no reader: a listing removes that entry too.
func TestIndexCrashBetweenWrites(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, _ := newStore(t, js)
	if _, err := s.CreateRun(ctx, checkpoint.Run{ID: "c1", Workflow: "claim", Status: running, Step: 1}); err != nil {
		t.Fatal(err)
	}
	update := func(to checkpoint.Status, hook func(*kvstore.Store, func(context.Context))) error {
		t.Helper()
		cctx, crash := context.WithCancel(ctx)
		defer crash()
		hook(s, func(context.Context) { crash() })
		defer hook(s, nil)
		r, err := s.GetRun(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		r.Status = to
		_, err = s.UpdateRun(cctx, r)
		return err
	}
	if err := update(completed, kvstore.SetAfterIndex); err == nil {
		t.Fatal("an update cut before its record succeeded")
	}
	if got := listIDs(t, s, checkpoint.Filter{Status: running}); got != "c1" {
		t.Fatalf("ListRuns(running) after the crash = %q, want c1: a live run is never missing", got)
	}
	if got := pageIDs(t, s, checkpoint.PageQuery{Status: completed}); got != "" {
		t.Fatalf("PageRuns(completed) after the crash = %q, want none", got)
	}
	if err := update(waiting, func(*kvstore.Store, func(context.Context)) {}); err != nil {
		t.Fatal(err)
	}
	pageIDs(t, s, checkpoint.PageQuery{Status: completed}) // removes the stale entry
	waitCounts(t, s, "crash before the record, written again", map[checkpoint.Status]int64{waiting: 1}, map[string]map[checkpoint.Status]int64{"claim": {waiting: 1}})

	if err := update(completed, kvstore.SetAfterRecord); err != nil {
		t.Fatalf("an update cut after its record: %v, want it done", err)
	}
	if got := listIDs(t, s, checkpoint.Filter{Status: waiting}); got != "" {
		t.Fatalf("ListRuns(waiting) after the crash = %q, want none", got)
	}
	waitCounts(t, s, "crash after the record, listed", map[checkpoint.Status]int64{completed: 1}, map[string]map[checkpoint.Status]int64{"claim": {completed: 1}})
}

// Run ids and workflow names that are the index's own tokens, or a
// status, are runs like any other: their keys never meet the index's,
// and no pattern of the store matches an index key.
func TestIndexNamesCollide(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, _ := newStore(t, js)
	names := []string{"c", "w", "s", "sw", "l", "n", "b", "e", "r", "d0", "d2", "running", "ix", "run", "progress"}
	for i, id := range names {
		wf := names[len(names)-1-i]
		run, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: wf, Status: running, Step: 1, StepName: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		next, cp := step1(run, "a")
		next.Status, cp.Status = completed, completed
		if _, err := s.Commit(ctx, next, cp); err != nil {
			t.Fatalf("Commit(%s): %v", id, err)
		}
		snap, err := s.Load(ctx, id, checkpoint.AtStep(2))
		if err != nil || snap.Previous == nil || snap.Run.Status != completed {
			t.Fatalf("Load(%s, 2) = %+v, %v", id, snap, err)
		}
	}
	if got := len(strings.Fields(pageIDs(t, s, checkpoint.PageQuery{Status: completed, Limit: 4}))); got != len(names) {
		t.Fatalf("PageRuns(completed) lists %d runs, want %d", got, len(names))
	}
	if got := len(strings.Fields(listIDs(t, s, checkpoint.Filter{}))); got != len(names) {
		t.Fatalf("ListRuns() lists %d runs, want %d", got, len(names))
	}
	for i, wf := range names {
		if got := pageIDs(t, s, checkpoint.PageQuery{Workflow: wf}); got != names[len(names)-1-i] {
			t.Errorf("PageRuns(workflow %s) = %q, want %q", wf, got, names[len(names)-1-i])
		}
	}
	c, err := s.CountRuns(ctx)
	if err != nil || c.Status[completed] != int64(len(names)) || len(c.Workflow) != len(names) {
		t.Fatalf("CountRuns = %+v, %v", c, err)
	}
	if wfs, err := s.Workflows(ctx); err != nil || len(wfs) != 0 {
		t.Fatalf("Workflows = %+v, %v; want none registered", wfs, err)
	}
}

// TestPathToNowWrittenAgain: a process writes the directory keys naming
// the nodes of 70 minutes and more on the path to now again once they are
// refreshAge old, so that the first read of a first page finds them in
// the stream's newest block, and not before.
func TestPathToNowWrittenAgain(t *testing.T) {
	js := connect(t)
	s, bucket := newStore(t, js)
	ctx := testCtx(t)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	create := func(id string) {
		t.Helper()
		now := time.Now()
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "path", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "s1", CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	// The root's key for the 199-day node of now, in the listing of the
	// workflow (the key a first page reads first).
	key := func() string {
		return fmt.Sprintf("run.=ix.w.path.r.%d", time.Now().UnixMilli()>>34)
	}
	revision := func() uint64 {
		t.Helper()
		e, err := kv.Get(ctx, key())
		if err != nil {
			t.Fatalf("get %s: %v", key(), err)
		}
		return e.Revision()
	}
	create("p1")
	first := revision()
	create("p2")
	if got := revision(); got != first {
		t.Errorf("%s written again by the next write at revision %d (first %d): want once a refreshAge", key(), got, first)
	}
	kvstore.SetRefresh(s, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	create("p3")
	if got := revision(); got <= first {
		t.Errorf("%s still at revision %d after refreshAge: want it written again", key(), got)
	}
}

// TestFirstPageReadsAfterTheHistory: the first page of a listing whose
// newest runs were written after a history of ended runs reads nothing
// the history's writes precede: no directory key written while the
// history was (a node of 70 minutes or more has children from all over
// it), no key of the path to now written before it. What a read costs
// the server is a load of each stream block it touches, so a first page
// that reads keys from all over the stream costs what the history does.
func TestFirstPageReadsAfterTheHistory(t *testing.T) {
	js := connect(t)
	s, bucket := newStore(t, js)
	ctx := testCtx(t)
	live := time.Now()
	runAt := func(id string, st checkpoint.Status, at time.Time) checkpoint.Run {
		return checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Status: st, Step: 1, StepName: "s1", CreatedAt: at, UpdatedAt: at}
	}
	// Runs still running, ten minutes old (the page's directories of
	// nodes shorter than 70 minutes hold what the last minutes wrote).
	for i := range 20 {
		if _, err := s.CreateRun(ctx, runAt(fmt.Sprintf("old-%d", i), checkpoint.StatusRunning, live.Add(-10*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	// The history: ended runs created over the month before, oldest first,
	// as a fleet writes them.
	const ended, span = 3000, 30 * 24 * time.Hour
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < ended; i = next.Add(1) - 1 {
				at := live.Add(-span - 10*time.Minute + time.Duration(i)*(span/ended))
				if _, err := s.CreateRun(ctx, runAt(fmt.Sprintf("end-%d", i), checkpoint.StatusCompleted, at)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	history := info.State.LastSeq
	// New runs, written once the path's keys are due to be written again
	// (a live status is listed from the live runs' entries, not a trie).
	kvstore.SetRefresh(s, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	for i := range 60 {
		if _, err := s.CreateRun(ctx, runAt(fmt.Sprintf("new-%02d", i), checkpoint.StatusCompleted, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []checkpoint.PageQuery{
		{Limit: 50}, {Workflow: "claim", Limit: 50}, {Status: checkpoint.StatusCompleted, Limit: 50},
	} {
		var old []uint64
		kvstore.SetOnRead(s, func(seqs []uint64) {
			for _, seq := range seqs {
				if seq <= history {
					old = append(old, seq)
				}
			}
		})
		p, err := s.PageRuns(ctx, q)
		kvstore.SetOnRead(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Runs) != 50 || p.Runs[0].ID != "new-59" || p.Runs[49].ID != "new-10" {
			t.Fatalf("PageRuns(%+v) = %d runs from %s: want new-59 to new-10", q, len(p.Runs), p.Runs[0].ID)
		}
		if len(old) > 0 {
			t.Errorf("PageRuns(%+v) read %d messages written before the history ended (sequence %d): %v", q, len(old), history, old)
		}
	}
}
