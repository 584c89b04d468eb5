package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
)

// BenchmarkCommitShapes measures, on a redis-server with the bench's
// durability (AOF, fsync every second), what the ways a step's commit
// could be written cost Redis and the caller, 128 in flight as a worker
// has them (issue 26, "a commit with the fewest round trips and
// server-side work"). Each op commits one step of its own run: a
// checkpoint written first-writer-wins, and the run moved on.
//
//   - script-doc: one Lua script (the store's shape): compare the run's
//     revision, SET NX the checkpoint, write the whole run document;
//   - script-cursor: the same script writing only a hot cursor (step,
//     name, updated, revision) and leaving the cold document alone;
//   - watch-multi: WATCH the run, read its revision, then MULTI / SET NX /
//     HSET / EXEC: the compare-and-set without a script, two round trips;
//   - plain-doc and plain-cursor: SET NX and HSET pipelined with no
//     compare-and-set at all: not safe (a cancel between is lost), the
//     floor of what Redis could do for the same writes.
//
// Besides ns/op it reports redis-server's CPU per op (redis-µs/op).
func BenchmarkCommitShapes(b *testing.B) {
	rdb := benchClient(b, 128, "--appendonly", "yes", "--appendfsync", "everysec")
	ctx := context.Background()
	doc := `{"run_id":"bench","workflow":"claim","version":1,"status":"running","step":2,"step_name":"step2","input":{"claim":"` +
		strings.Repeat("x", 1000) + `"},"created_at":"2026-12-04T10:00:00Z","updated_at":"2026-12-04T10:00:01Z","steps_taken":1}`
	cp := `{"run_id":"bench","step":1,"name":"step1","state":{"claim":"` + strings.Repeat("y", 180) + `"},"next":"step2","status":"running"}`
	script := func(body string) *redis.Script {
		return redis.NewScript(`local rev = redis.call('HGET', KEYS[1], 'rev')
if rev ~= ARGV[1] then return -3 end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX') then return -2 end
` + body + `
return tonumber(rev) + 1`)
	}
	withDoc := script(`redis.call('HSET', KEYS[1], 'doc', ARGV[3], 'rev', tonumber(rev) + 1)`)
	withCursor := script(`redis.call('HSET', KEYS[1], 'step', ARGV[3], 'name', ARGV[4], 'updated', ARGV[5], 'rev', tonumber(rev) + 1)`)
	var runs atomic.Int64
	shapes := []struct {
		name   string
		commit func(run, cpKey string) error
	}{
		{"script-doc", func(run, cpKey string) error {
			return withDoc.Run(ctx, rdb, []string{run, cpKey}, "1", cp, doc).Err()
		}},
		{"script-cursor", func(run, cpKey string) error {
			return withCursor.Run(ctx, rdb, []string{run, cpKey}, "1", cp, "2", "step2", "1764842401000").Err()
		}},
		{"watch-multi", func(run, cpKey string) error {
			return rdb.Watch(ctx, func(tx *redis.Tx) error {
				if rev, err := tx.HGet(ctx, run, "rev").Result(); err != nil || rev != "1" {
					return fmt.Errorf("rev %q: %w", rev, err)
				}
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.SetNX(ctx, cpKey, cp, 0)
					p.HSet(ctx, run, "doc", doc, "rev", 2)
					return nil
				})
				return err
			}, run)
		}},
		{"plain-doc", func(run, cpKey string) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.SetNX(ctx, cpKey, cp, 0)
				p.HSet(ctx, run, "doc", doc, "rev", 2)
				return nil
			})
			return err
		}},
		{"plain-cursor", func(run, cpKey string) error {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.SetNX(ctx, cpKey, cp, 0)
				p.HSet(ctx, run, "step", "2", "name", "step2", "updated", "1764842401000", "rev", 2)
				return nil
			})
			return err
		}},
	}
	for _, shape := range shapes {
		b.Run(shape.name, func(b *testing.B) {
			// The runs, each at revision 1, before the clock starts.
			first := runs.Load()
			p := rdb.Pipeline()
			for i := range int64(b.N) {
				p.HSet(ctx, "shape:"+strconv.FormatInt(first+i+1, 10), "rev", 1)
			}
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			cpu0 := testenv.RedisCPU(b, rdb)
			b.SetParallelism(max(1, 128/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					run := "shape:" + strconv.FormatInt(runs.Add(1), 10)
					if err := shape.commit(run, run+":cp:1"); err != nil && !errors.Is(err, redis.Nil) {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-cpu0).Microseconds())/float64(b.N), "redis-µs/op")
		})
	}
}
