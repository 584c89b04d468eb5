package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/metrics"
)

// Every fleet gauge has a series for every registered workflow (and each
// of its steps) from the first scan, at zero while nothing is there, so
// that dashboards show 0 and alerts see the series rise; with JetStream,
// the dead-letter and consumer gauges too, before their stream or
// consumer exists.
func TestFleetGaugesAtZero(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server and nats-server")
	}
	_, js := testenv.StartNATS(t).Connect(t)
	opt, err := redis.ParseURL(testenv.StartRedis(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb, redisstore.Options{})
	ctx := context.Background()
	if err := store.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "claim", Version: 1, FirstStep: "receive", Steps: []string{"receive", "pay"}}); err != nil {
		t.Fatal(err)
	}

	m := metrics.New()
	fleet, err := m.NewFleet(metrics.FleetConfig{Store: store, JetStream: js, StuckMin: time.Second, StuckDefault: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, metrics.Mux(m))
	if err := fleet.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	s := scrape(t, url)
	for _, st := range []string{"running", "waiting", "completed", "failed", "cancelled", "dead"} {
		s.want(t, `durable_runs{status="`+st+`",workflow="claim"}`, 0)
	}
	for _, step := range []string{"receive", "pay"} {
		s.want(t, `durable_runs_stuck{step="`+step+`",workflow="claim"}`, 0)
		s.want(t, `durable_running_oldest_progress_age_seconds{step="`+step+`",workflow="claim"}`, 0)
		s.want(t, `durable_stuck_threshold_seconds{step="`+step+`",workflow="claim"}`, 60)
	}
	for _, kind := range []string{"approval", "timer", "signal"} {
		s.want(t, `durable_waits_past_ttl{kind="`+kind+`",workflow="claim"}`, 0)
	}
	s.want(t, `durable_dead_letter_messages`, 0)
	s.want(t, `durable_consumer_pending_messages{consumer="steps-claim"}`, 0)
	s.want(t, `durable_consumer_ack_pending_messages{consumer="steps-claim"}`, 0)
	s.want(t, `durable_consumer_redelivered_messages{consumer="steps-claim"}`, 0)
	s.want(t, `durable_run_tombstones`, 0)
	s.want(t, `durable_oldest_ended_run_age_seconds`, 0)

	// The same series rise: a run at step "pay" without progress for an
	// hour is stuck.
	old := time.Now().UTC().Add(-time.Hour)
	if _, err := store.CreateRun(ctx, checkpoint.Run{ID: "z-stuck", Workflow: "claim", Version: 1, Status: checkpoint.StatusRunning,
		Step: 2, StepName: "pay", CreatedAt: old, UpdatedAt: old}); err != nil {
		t.Fatal(err)
	}
	if err := fleet.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	s = scrape(t, url)
	s.want(t, `durable_runs{status="running",workflow="claim"}`, 1)
	s.want(t, `durable_runs_stuck{step="pay",workflow="claim"}`, 1)
	s.want(t, `durable_runs_stuck{step="receive",workflow="claim"}`, 0)
	if age := s[`durable_running_oldest_progress_age_seconds{step="pay",workflow="claim"}`]; age < 3500 {
		t.Errorf("oldest progress age at pay = %v, want about 3600", age)
	}

	// An ended run two days old, and one purged: the retention gauges.
	ended := time.Now().UTC().Add(-48 * time.Hour)
	for _, id := range []string{"z-done", "z-purged"} {
		if _, err := store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Status: checkpoint.StatusCompleted,
			Step: 2, StepName: "pay", CreatedAt: ended, UpdatedAt: ended}); err != nil {
			t.Fatal(err)
		}
	}
	purged, err := store.GetRun(ctx, "z-purged")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Purge(ctx, purged, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := fleet.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	s = scrape(t, url)
	s.want(t, `durable_run_tombstones`, 1)
	if age := s[`durable_oldest_ended_run_age_seconds`]; age < 47*3600 || age > 49*3600 {
		t.Errorf("oldest ended run age = %v s, want about 48h", age)
	}
}
