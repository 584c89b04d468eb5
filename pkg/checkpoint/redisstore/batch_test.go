package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
)

// Many steps at once share pipelines: every Load and Commit still gets its
// own reply, first-writer-wins holds per step, and the commands reached
// Redis in fewer round trips than calls.
func TestConcurrentStepsShareRoundTrips(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	const runs = 200
	for i := range runs {
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprintf("r%d", i), Workflow: "w", Status: checkpoint.StatusRunning, Step: 1}); err != nil {
			t.Fatal(err)
		}
	}
	calls0, reads0 := serverStats(t, client)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, losses := map[string]int{}, map[string]int{}
	// Two writers per run race for step 1.
	for i := range 2 * runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("r%d", i%runs)
			snap, err := s.Load(ctx, id, checkpoint.AtStep(1))
			if err != nil {
				t.Error(err)
				return
			}
			next := snap.Run
			next.Step = 2
			_, err = s.Commit(ctx, next, checkpoint.Checkpoint{Step: 1, State: []byte(fmt.Sprintf(`{"writer":%d}`, i))})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins[id]++
			case errors.Is(err, checkpoint.ErrCheckpointExists), errors.Is(err, checkpoint.ErrConflict):
				losses[id]++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := range runs {
		id := fmt.Sprintf("r%d", i)
		if wins[id] != 1 || losses[id] != 1 {
			t.Errorf("run %s: %d commits won, %d lost; want 1 and 1", id, wins[id], losses[id])
		}
		run, err := s.GetRun(ctx, id)
		if err != nil || run.Step != 2 {
			t.Errorf("run %s at step %d (%v), want 2", id, run.Step, err)
		}
	}
	// Redis counts each script and transaction of a pipeline as a call,
	// and each batch of bytes it reads from a connection as one read
	// event: one call per read without pipelining.
	calls1, reads1 := serverStats(t, client)
	calls, reads := calls1-calls0, reads1-reads0
	if calls < 4*runs {
		t.Errorf("%d scripts and transactions reached Redis, want at least %d", calls, 4*runs)
	}
	if reads >= calls {
		t.Errorf("%d scripts and transactions came in %d reads: not pipelined", calls, reads)
	}
	t.Logf("%d scripts and transactions in %d reads", calls, reads)
}

// A Redis that forgot its scripts (restart, SCRIPT FLUSH) answers NOSCRIPT
// to the pipelined EVALSHAs; each is sent again with its source.
func TestPipelinedScriptsSurviveScriptFlush(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	const runs = 64
	for i := range runs {
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprintf("f%d", i), Workflow: "w", Status: checkpoint.StatusRunning, Step: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Load(ctx, fmt.Sprintf("f%d", i), checkpoint.AtStep(round+1)); err != nil {
					t.Errorf("round %d: load after SCRIPT FLUSH: %v", round, err)
				}
			}()
		}
		wg.Wait()
	}
}

// A caller whose context ends while its call waits for a pipeline gets
// the context's error.
func TestCancelledCallReturnsContextError(t *testing.T) {
	client := startClient(t)
	s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// With nothing in flight the call is sent at once and Redis answers;
	// either way the caller must not hang, and a cancelled wait says so.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Load(ctx, fmt.Sprintf("c%d", i), checkpoint.AtStep(1))
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("load with a cancelled context: %v", err)
			}
		}()
	}
	wg.Wait()
}

// serverStats reads how many scripts (EVAL and EVALSHA) and transactions
// (EXEC) Redis has run and how many read events it has processed.
func serverStats(t *testing.T, client *redis.Client) (calls, reads int) {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats", "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		switch {
		case strings.HasPrefix(line, "cmdstat_evalsha:calls="), strings.HasPrefix(line, "cmdstat_eval:calls="), strings.HasPrefix(line, "cmdstat_exec:calls="):
			v := strings.SplitN(strings.SplitN(line, "calls=", 2)[1], ",", 2)[0]
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			calls += n
		case strings.HasPrefix(line, "total_reads_processed:"):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "total_reads_processed:"))
			if err != nil {
				t.Fatalf("stats line %q: %v", line, err)
			}
			reads = n
		}
	}
	return calls, reads
}
