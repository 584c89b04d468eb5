package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// System names in reports.
const (
	SystemFloor          = "floor"
	SystemFloorPipelined = "floor-pipelined"
	SystemDurableRedis   = "durable-redis"
	SystemDurableKV      = "durable-kv"
)

// Durability modes of a bench: the servers' default (Redis fsyncs its AOF
// every second, JetStream syncs its files every two minutes) or strict
// (Redis fsyncs every write, JetStream syncs every write), for the floor
// and durable alike.
const (
	DurabilityDefault = "default"
	DurabilityStrict  = "strict"
)

// durabilities says what each system's writes survive, as RESULT lines
// report it, per durability mode.
func durabilities(mode string) (redisAndNATS, kv string) {
	if mode == DurabilityStrict {
		return "redis appendfsync always + jetstream sync always", "jetstream sync always (steps and kv checkpoints)"
	}
	return "redis appendfsync everysec + jetstream file store default sync", "jetstream file store default sync (steps and kv checkpoints)"
}

// system is one thing the bench measures, as the driver sees it.
type system struct {
	name       string
	durability string
	// mode and redisURL configure its worker process.
	mode     string
	redisURL string
	// stream and consumer whose acks mark finished steps.
	stream, consumer string
	// start starts run id: durable's client.Start, or the floor's first publish.
	start func(ctx context.Context, id string) error
	// verify checks, after a phase, that every run completed.
	verify func(ctx context.Context, ids []string) error
	// client of a durable system's store.
	client *client.Client
}

// isFloor says whether system name is one of the floors.
func isFloor(name string) bool { return name == SystemFloor || name == SystemFloorPipelined }

func floorSystem(kind floorKind, js jetstream.JetStream, rdb *redis.Client, redisURL, durability string) *system {
	mode := ModeFloor
	if kind == pipelinedFloor {
		mode = ModeFloorPipelined
	}
	return &system{
		name: kind.name, durability: durability,
		mode: mode, redisURL: redisURL,
		stream: kind.stream, consumer: kind.consumer,
		start: func(ctx context.Context, id string) error {
			return kind.publish(ctx, js, floorMsg{RunID: id, Step: 1, State: Initial(id)})
		},
		verify: func(ctx context.Context, ids []string) error {
			const chunk = 500
			for i := 0; i < len(ids); i += chunk {
				part := ids[i:min(i+chunk, len(ids))]
				keys := make([]string, len(part))
				for j, id := range part {
					keys[j] = kind.key(id, StepsPerRun)
				}
				vals, err := rdb.MGet(ctx, keys...).Result()
				if err != nil {
					return fmt.Errorf("verify %s runs: %w", kind.name, err)
				}
				for j, v := range vals {
					if v == nil {
						return fmt.Errorf("%s run %s has no output of step %d", kind.name, part[j], StepsPerRun)
					}
				}
			}
			return nil
		},
	}
}

func durableSystem(name, durability, redisURL string, cl *client.Client) *system {
	store := cl.Store()
	return &system{
		name: name, durability: durability,
		mode: ModeDurable, redisURL: redisURL, client: cl,
		stream: queue.StepStream, consumer: queue.ConsumerName(Workflow),
		start: func(ctx context.Context, id string) error {
			_, created, err := cl.Start(ctx, client.StartRequest{Workflow: Workflow, RunID: id, Input: Input(id), By: "bench"})
			if err != nil {
				return err
			}
			if !created {
				return fmt.Errorf("run %s existed already", id)
			}
			return nil
		},
		verify: func(ctx context.Context, ids []string) error {
			return forEach(ctx, ids, 16, func(ctx context.Context, id string) error {
				run, err := store.GetRun(ctx, id)
				if err != nil {
					return fmt.Errorf("verify run %s: %w", id, err)
				}
				if run.Status != checkpoint.StatusCompleted || run.Steps != StepsPerRun {
					return fmt.Errorf("run %s is %s after %d steps, want completed after %d", id, run.Status, run.Steps, StepsPerRun)
				}
				return nil
			})
		},
	}
}

// forEach calls fn for every id with up to n calls at once and returns the
// first error; after one, the calls not yet begun are skipped.
func forEach(outer context.Context, ids []string, n int, fn func(ctx context.Context, id string) error) error {
	ctx, cancel := context.WithCancel(outer)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	next := make(chan string)
	for range min(n, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				if err := fn(ctx, id); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, id := range ids {
		select {
		case next <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return outer.Err()
}
