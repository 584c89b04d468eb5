package redisstore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
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
	for _, st := range checkpoint.Statuses {
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

// On a Redis Cluster the index entries move in a call of their own: the
// conformance suite holds there too, and the index shards spread the
// starts over every primary.
func TestIndexOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a Redis Cluster")
	}
	cluster := fleet.StartRedisCluster(t, t.TempDir(), fleet.RedisClusterOptions{Primaries: 3})
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		return redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	})

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
