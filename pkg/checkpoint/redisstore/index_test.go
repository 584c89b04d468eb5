package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
)

// legacyRun writes run as the store wrote it before the run index: the
// run hash (doc, rev, last_cp, no st) and the one sorted set of every
// run id, scored by creation.
func legacyRun(t *testing.T, ctx context.Context, client *redis.Client, prefix string, run checkpoint.Run) {
	t.Helper()
	doc := fmt.Sprintf(`{"run_id":%q,"workflow":%q,"version":1,"status":%q,"step":1,"step_name":"a","created_at":%q,"updated_at":%q}`,
		run.ID, run.Workflow, run.Status, run.CreatedAt.Format(time.RFC3339Nano), run.UpdatedAt.Format(time.RFC3339Nano))
	key := prefix + ":{" + run.ID + "}:run"
	if err := client.HSet(ctx, key, "doc", doc, "rev", 3, "last_cp", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(ctx, prefix+":runs", redis.Z{Score: float64(run.CreatedAt.UnixMilli()), Member: run.ID}).Err(); err != nil {
		t.Fatal(err)
	}
}

// A store written by the release before the run index: the backfill
// indexes every run once, in batches, also one a write indexed since the
// upgrade, and the legacy set is gone when it is done.
func TestBackfillFromPreviousFormat(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	prefix := uniquePrefix()
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	statuses := []checkpoint.Status{checkpoint.StatusRunning, checkpoint.StatusWaiting, checkpoint.StatusCompleted, checkpoint.StatusDead}
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	want := map[checkpoint.Status]int64{}
	const n = 40
	for i := range n {
		st := statuses[i%len(statuses)]
		wf := "claim"
		if i%5 == 0 {
			wf = "refund"
		}
		at := base.Add(time.Duration(i) * time.Minute)
		legacyRun(t, ctx, client, prefix, checkpoint.Run{ID: fmt.Sprintf("old-%02d", i), Workflow: wf, Status: st, CreatedAt: at, UpdatedAt: at})
		want[st]++
	}
	// A run the new code writes before the backfill reaches it: indexed
	// by that write, and not counted again.
	run, err := s.GetRun(ctx, "old-01")
	if err != nil {
		t.Fatal(err)
	}
	run.Status = checkpoint.StatusCompleted
	if _, err := s.UpdateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	want[checkpoint.StatusWaiting]--
	want[checkpoint.StatusCompleted]++

	indexed, calls := 0, 0
	for {
		p, err := s.BackfillIndex(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		indexed += p.Indexed
		if p.Done {
			break
		}
		if calls > 20 {
			t.Fatalf("backfill not done after %d calls: %+v", calls, p)
		}
	}
	if indexed != n-1 || calls != 6 {
		t.Errorf("backfill indexed %d runs in %d calls, want %d in 6", indexed, calls, n-1)
	}
	if p, err := s.BackfillIndex(ctx, 7); err != nil || p.Indexed != 0 || !p.Done {
		t.Errorf("second backfill = %+v, %v; want nothing to do", p, err)
	}
	if k, _ := client.Exists(ctx, prefix+":runs").Result(); k != 0 {
		t.Errorf("legacy run set still exists after the backfill")
	}
	counts, err := s.CountRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range checkpoint.Statuses() {
		if counts.Status[st] != want[st] {
			t.Errorf("count of %s = %d, want %d", st, counts.Status[st], want[st])
		}
	}
	if got := counts.Workflow["refund"][checkpoint.StatusRunning]; got != 2 {
		t.Errorf("count of running refunds = %d, want 2 (old-00, old-20)", got)
	}
	waiting, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusWaiting})
	if err != nil || int64(len(waiting)) != want[checkpoint.StatusWaiting] {
		t.Errorf("ListRuns(waiting) = %d runs, %v; want %d", len(waiting), err, want[checkpoint.StatusWaiting])
	}
	seen := map[string]bool{}
	q := checkpoint.PageQuery{Limit: 9}
	for {
		page, err := s.PageRuns(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			if seen[r.ID] {
				t.Errorf("run %s listed twice", r.ID)
			}
			seen[r.ID] = true
		}
		if page.Next.IsZero() {
			break
		}
		q.After = page.Next
	}
	if len(seen) != n {
		t.Errorf("pages listed %d runs, want %d", len(seen), n)
	}
}

// On a Redis Cluster the index entries move in a call of their own
// (TestClusterConformance runs the suite there), and the index shards
// spread the starts over every primary.
func TestIndexOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a Redis Cluster")
	}
	cluster := fleet.StartRedisCluster(t, t.TempDir(), fleet.RedisClusterOptions{Primaries: 3})
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	for _, p := range primaries {
		before[p.Name] = scriptCalls(t, ctx, p.Addr)
	}
	prefix := uniquePrefix()
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	const n = 300
	for i := range n {
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprintf("spread-%03d", i), Workflow: "claim", Status: checkpoint.StatusRunning}); err != nil {
			t.Fatal(err)
		}
	}
	// Every start writes its run and its index shard: each primary
	// takes a share of both, and no node takes them all.
	for _, p := range primaries {
		calls := scriptCalls(t, ctx, p.Addr) - before[p.Name]
		t.Logf("primary %s: %d script calls for %d starts", p.Name, calls, n)
		if calls < n/6 || calls > 2*n*9/10 {
			t.Errorf("primary %s ran %d of the %d starts' scripts, want a share (between %d and %d)", p.Name, calls, 2*n, n/6, 2*n*9/10)
		}
	}
	counts, err := s.CountRuns(ctx)
	if err != nil || counts.Status[checkpoint.StatusRunning] != n {
		t.Fatalf("CountRuns = %+v, %v; want %d running", counts, err, n)
	}
}

var evalCalls = regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`)

// scriptCalls is how many scripts the node at addr ran (INFO commandstats).
func scriptCalls(t *testing.T, ctx context.Context, addr string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range evalCalls.FindAllStringSubmatch(info, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}

// A purge deletes every key of the run, its branches', logs' and
// liveness mark included, and its index entries: only the tombstone is
// left, and it expires.
func TestPurgeLeavesOnlyTheTombstone(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	prefix := uniquePrefix()
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	const id = "gone-1"
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.RecordCall(ctx, id, checkpoint.AtStep(1), checkpoint.CallRecord{Name: "model"})
	must(err)
	run.Step = 2
	run, err = s.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, State: []byte(`{}`), FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "b"}, {Step: "b"}}}})
	must(err)
	for i := 1; i <= 2; i++ {
		_, err = s.RecordCall(ctx, id, checkpoint.AtBranch(2, i), checkpoint.CallRecord{Name: "fetch"})
		must(err)
		_, err = s.RecordFailure(ctx, id, checkpoint.AtBranch(2, i), checkpoint.Failure{Attempt: 1, Error: "flaky"})
		must(err)
		_, err = s.CommitBranch(ctx, checkpoint.Checkpoint{RunID: id, Step: 2, Branch: i, Of: 2, State: []byte(`{}`), Spend: 0.5})
		must(err)
	}
	_, err = s.RecordFailure(ctx, id, checkpoint.AtStep(3), checkpoint.Failure{Attempt: 1, Error: "boom"})
	must(err)
	must(s.MarkAlive(ctx, id, time.Now()))
	for i := range 150 { // past AuditKept: the oldest go to the audit log
		run.Audit = append(run.Audit, checkpoint.AuditEntry{Kind: "reminder", Step: 3, At: time.Now(), By: fmt.Sprint(i)})
	}
	run.Status, run.Step = checkpoint.StatusDead, 3
	run, err = s.UpdateRun(ctx, run)
	must(err)
	if keys, _ := client.Keys(ctx, prefix+":{"+id+"}*").Result(); len(keys) < 15 {
		t.Fatalf("before the purge: %d keys %v, want the run's keys of every kind", len(keys), keys)
	}
	must(s.Purge(ctx, run, time.Hour))

	keys, err := client.Keys(ctx, prefix+":{"+id+"}*").Result()
	must(err)
	if len(keys) != 1 || keys[0] != prefix+":{"+id+"}:run" {
		t.Errorf("after the purge: keys %v, want the tombstone alone", keys)
	}
	fields, err := client.HKeys(ctx, prefix+":{"+id+"}:run").Result()
	must(err)
	if len(fields) != 1 || fields[0] != "tomb" {
		t.Errorf("tombstone fields %v, want tomb alone", fields)
	}
	if ttl, err := client.PTTL(ctx, prefix+":{"+id+"}:run").Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("tombstone TTL %s, %v; want at most the hour it is kept", ttl, err)
	}
	size, err := client.MemoryUsage(ctx, prefix+":{"+id+"}:run").Result()
	must(err)
	t.Logf("tombstone: %d bytes of Redis memory", size)
	ix, err := client.Keys(ctx, prefix+":ix{*").Result()
	must(err)
	for _, k := range ix {
		if typ, _ := client.Type(ctx, k).Result(); typ != "zset" || k[len(k)-2:] == ":t" {
			continue
		}
		if _, err := client.ZScore(ctx, k, id).Result(); err == nil {
			t.Errorf("index %s still lists %s", k, id)
		}
	}
}

// EndedBefore returns exactly the earliest ended runs over every shard and
// status, though it reads each shard's index a page at a time.
func TestEndedBeforeEarliestOverShards(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	statuses := []checkpoint.Status{checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead}
	const n = 300
	var want []string
	for i := range n {
		// End times out of id order, several in one millisecond.
		at := base.Add(time.Duration((i*7919)%n/3) * time.Millisecond)
		id := fmt.Sprintf("e-%03d", i)
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "w", Status: statuses[i%4], CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("%013d %s", at.UnixMilli(), id))
	}
	slices.Sort(want)
	for _, limit := range []int{1, 37, 299, 500} {
		runs, err := s.EndedBefore(ctx, base.Add(time.Hour), limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range runs {
			got = append(got, fmt.Sprintf("%013d %s", r.UpdatedAt.UnixMilli(), r.ID))
		}
		if w := want[:min(limit, n)]; !slices.Equal(got, w) {
			t.Errorf("EndedBefore(limit %d) = %d runs, want the %d earliest: first difference at %d", limit, len(got), len(w), firstDiff(got, w))
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A status changed by the previous release (which knows no index) is
// found by a listing, which moves the run's entries and its indexed
// status: a redrive after that lists the run as running again.
func TestStatusChangedByPreviousReleaseThenRedriven(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	prefix := uniquePrefix()
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "old-1", Workflow: "w", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The previous release dead-letters it: the doc and rev change, the
	// index and st do not.
	dead := run
	dead.Status, dead.Error = checkpoint.StatusDead, "boom"
	doc := fmt.Sprintf(`{"run_id":"old-1","workflow":"w","version":0,"status":"dead","step":1,"step_name":"","error":"boom","created_at":%q,"updated_at":%q}`,
		run.CreatedAt.Format(time.RFC3339Nano), run.UpdatedAt.Format(time.RFC3339Nano))
	key := prefix + ":{old-1}:run"
	if err := client.HSet(ctx, key, "doc", doc).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HIncrBy(ctx, key, "rev", 1).Err(); err != nil {
		t.Fatal(err)
	}
	running, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusRunning})
	if err != nil || len(running) != 0 {
		t.Fatalf("running after the old release's dead letter: %v, %v; want none", ids(running), err)
	}
	deadRuns, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusDead})
	if err != nil || len(deadRuns) != 1 {
		t.Fatalf("dead after the listing moved it: %v, %v; want old-1", ids(deadRuns), err)
	}
	redriven := deadRuns[0]
	redriven.Status, redriven.Error = checkpoint.StatusRunning, ""
	if _, err := s.UpdateRun(ctx, redriven); err != nil {
		t.Fatal(err)
	}
	running, err = s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusRunning})
	if err != nil || len(running) != 1 {
		t.Errorf("running after the redrive: %v, %v; want old-1 (repair reads this list)", ids(running), err)
	}
	counts, err := s.CountRuns(ctx)
	if err != nil || counts.Status[checkpoint.StatusRunning] != 1 || counts.Status[checkpoint.StatusDead] != 0 {
		t.Errorf("counts after the redrive: %v, %v; want 1 running, 0 dead", counts.Status, err)
	}
}

func ids(runs []checkpoint.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

// failIndex fails the scripts on the run index's shards (their keys
// carry ":ix{") while down is set: in a Cluster, the index's second call
// of a write lost, as when the shard's primary fails over between the
// two.
type failIndex struct{ down *atomic.Bool }

var errIndexDown = errors.New("index shard down (test fault)")

func (f failIndex) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f failIndex) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.hit(cmd) {
			cmd.SetErr(errIndexDown)
			return errIndexDown
		}
		return next(ctx, cmd)
	}
}

func (f failIndex) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rest := make([]redis.Cmder, 0, len(cmds))
		for _, cmd := range cmds {
			if f.hit(cmd) {
				cmd.SetErr(errIndexDown)
			} else {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return errIndexDown
		}
		return next(ctx, rest)
	}
}

func (f failIndex) hit(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := cmd.Name()
	return f.down.Load() && (name == "evalsha" || name == "eval") && len(args) > 3 &&
		strings.Contains(fmt.Sprint(args[3]), ":ix{")
}

// In a Cluster a write whose index call fails is written: Commit and
// UpdateRun succeed (a worker that saw an error would only retry a step
// that is committed), the run stays listed under its old status, and a
// listing of that status moves it. A create whose index call fails says
// so, as the run is in no listing, and creating it again indexes it.
func TestClusterIndexCallLost(t *testing.T) {
	cluster := startCluster(t, 3)
	var down atomic.Bool
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Options().Addrs})
	client.AddHook(failIndex{&down})
	t.Cleanup(func() { _ = client.Close() })
	ctx := testCtx(t)
	s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "lost-1", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1, StepName: "a"})
	if err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	run.Step, run.StepName = 2, "b"
	if run, err = s.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, Name: "a", State: []byte(`{}`), Next: "b", Status: checkpoint.StatusRunning}); err != nil {
		t.Fatalf("commit that keeps the status (no index call): %v", err)
	}
	run.Status = checkpoint.StatusCompleted
	done, err := s.Commit(ctx, run, checkpoint.Checkpoint{Step: 2, Name: "b", State: []byte(`{}`), Status: checkpoint.StatusCompleted})
	if err != nil || done.Rev != run.Rev+1 || done.Status != checkpoint.StatusCompleted {
		t.Fatalf("completing commit whose index call failed = rev %d %s, %v; want rev %d completed, no error", done.Rev, done.Status, err, run.Rev+1)
	}
	down.Store(false)
	wantCounts(t, s, 1, 0) // the index lags: the fault hit
	if runs, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusRunning}); err != nil || len(runs) != 0 {
		t.Fatalf("ListRuns(running) = %v, %v; want none", ids(runs), err)
	}
	wantCounts(t, s, 0, 1)

	down.Store(true)
	two := checkpoint.Run{ID: "lost-2", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1, StepName: "a"}
	if _, err := s.CreateRun(ctx, two); err == nil || errors.Is(err, checkpoint.ErrRunExists) {
		t.Fatalf("create whose index call failed = %v, want an error that says to create it again", err)
	}
	down.Store(false)
	stored, err := s.CreateRun(ctx, two)
	if !errors.Is(err, checkpoint.ErrRunExists) {
		t.Fatalf("create again = %v, want ErrRunExists", err)
	}
	wantCounts(t, s, 1, 1)
	down.Store(true)
	stored.Status = checkpoint.StatusCancelled
	if _, err := s.UpdateRun(ctx, stored); err != nil {
		t.Fatalf("update whose index call failed = %v, want no error", err)
	}
	down.Store(false)
	if runs, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusRunning}); err != nil || len(runs) != 0 {
		t.Fatalf("ListRuns(running) = %v, %v; want none", ids(runs), err)
	}
	if runs, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusCancelled}); err != nil || len(runs) != 1 {
		t.Fatalf("ListRuns(cancelled) = %v, %v; want lost-2", ids(runs), err)
	}
}

func wantCounts(t *testing.T, s *redisstore.Store, running, completed int64) {
	t.Helper()
	counts, err := s.CountRuns(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := counts.Status; got[checkpoint.StatusRunning] != running || got[checkpoint.StatusCompleted] != completed {
		t.Fatalf("counts %v, want running %d, completed %d", got, running, completed)
	}
}
