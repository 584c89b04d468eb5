package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// kvStream is the stream of the KV store's bucket as the bench opens it
// (kvstore.Options' default bucket, "durable").
const kvStream = "KV_durable"

// fillAll writes n ended runs and takes the store's bytes before and
// after: the first run alone (its footprint), then the rest, then waits
// until the store is quiet.
func (h *historyPhase) fillAll(ctx context.Context, n int) error {
	res := h.res
	var err error
	if res.StoreBytesEmpty, err = h.storeBytes(ctx); err != nil {
		return err
	}
	h.b.progress.begin(h.label+" fill", n)
	cpuBefore := h.b.cpu(0)
	began := time.Now()
	first := h.main.id("end", 0)
	if res.Filled, err = h.footprint(ctx, first, func() error { return h.writeEnded(ctx, n, 0) }); err != nil {
		return fmt.Errorf("%s: fill: %w", h.label, err)
	}
	if err := h.fill(ctx, n); err != nil {
		return fmt.Errorf("%s: fill: %w", h.label, err)
	}
	took := time.Since(began)
	res.FillCPU = h.b.cpu(0).since(cpuBefore)
	res.FillSeconds, res.FillRunsPerS = took.Seconds(), float64(n)/took.Seconds()
	settled := time.Now()
	if err := h.settle(ctx); err != nil {
		return fmt.Errorf("%s: after the fill: %w", h.label, err)
	}
	res.SettleSeconds = time.Since(settled).Seconds()
	if res.StoreBytesFull, err = h.storeBytes(ctx); err != nil {
		return err
	}
	res.BytesPerEndedRun = float64(res.StoreBytesFull-res.StoreBytesEmpty) / float64(n)
	h.b.progress.end("%d ended runs written through the store in %.1fs (%.0f runs/s), %.0f bytes each",
		n, res.FillSeconds, res.FillRunsPerS, res.BytesPerEndedRun)
	return nil
}

// fill writes ended runs 1 to n-1, historyFillConcurrency at once.
func (h *historyPhase) fill(outer context.Context, n int) error {
	ctx, cancel := context.WithCancel(outer)
	defer cancel()
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		once       sync.Once
		first      error
	)
	next.Store(1)
	for range historyFillConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := h.writeEnded(ctx, n, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
				done.Add(1)
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-finished:
			if first != nil {
				return first
			}
			return outer.Err()
		case <-tick.C:
			h.b.progress.update(int(done.Load()) + 1)
		}
	}
}

// writeEnded writes ended run i of n: the template's record, created at
// its place in the month before the live work, then its nine checkpoints.
func (h *historyPhase) writeEnded(ctx context.Context, n, i int) error {
	id := h.main.id("end", i)
	created := h.liveSince.Add(-historySpan + time.Duration(i)*(historySpan/time.Duration(n)))
	run, cps := h.tmpl.forRun(id, created)
	stored, err := h.main.store.CreateRun(ctx, run)
	if err != nil {
		return err
	}
	for _, cp := range cps {
		if stored, err = h.main.store.Commit(ctx, stored, cp); err != nil {
			return err
		}
	}
	return nil
}

// redisFootprint writes a run with write and returns its keys and their
// MEMORY USAGE (the key layout is the Redis store's: every key of run R
// has the hash tag {R}); its entries in the run index are not counted.
func (b *Bench) redisFootprint(ctx context.Context, id string, write func() error) (RunFootprint, error) {
	var fp RunFootprint
	if err := write(); err != nil {
		return fp, err
	}
	iter := b.rdb.Scan(ctx, 0, "durable:{"+id+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := b.rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			return fp, fmt.Errorf("redis MEMORY USAGE %s: %w", iter.Val(), err)
		}
		fp.Keys++
		fp.Bytes += n
	}
	if err := iter.Err(); err != nil {
		return fp, fmt.Errorf("redis SCAN the keys of run %s: %w", id, err)
	}
	return fp, nil
}

// redisQuiet waits until Redis rewrites no AOF (a fill grows the AOF past
// its rewrite threshold, and a rewrite under way takes a core of two) and
// its key table is not being rehashed (redisRehashed).
func (b *Bench) redisQuiet(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		info, err := b.rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return fmt.Errorf("redis INFO persistence: %w", err)
		}
		busy := false
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if (k == "aof_rewrite_in_progress" || k == "aof_rewrite_scheduled") && v != "0" {
				busy = true
			}
		}
		if !busy {
			return b.redisRehashed(ctx)
		}
		if time.Now().After(deadline) {
			return errors.New("redis still rewrites its AOF after 10 minutes")
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// redisRehashed waits until Redis's table of keys is not being rehashed.
// The table doubles when the keys outnumber its slots (at 8.4 million
// keys: a million claims-9 runs cross it), then moves its entries to the
// new table a slot per command and about 20,000 a second in the
// background; until it is done a lookup looks in both tables. Measured
// here, 1,100 HMGETs of 3 KB records in a Redis of 10 million keys: 3.5 µs
// of Redis time each while it rehashed, 1.6 µs after, 1.1 µs in a Redis
// of the 1,100 alone. A fleet's Redis goes through it once per doubling,
// for minutes; the fill crosses it in its last minute and would leave the
// measure inside it. So the bench finishes the move (an EXISTS of a key
// that is not there moves one slot) and says how long it took. DEBUG is
// allowed from 127.0.0.1 on the bench's redis-server
// (enable-debug-command local); elsewhere the wait is skipped.
func (b *Bench) redisRehashed(ctx context.Context) error {
	began := time.Now()
	for rounds := 0; ; rounds++ {
		stats, err := b.rdb.Do(ctx, "DEBUG", "HTSTATS", "0").Text()
		if err != nil {
			b.progress.linef("%-36s not known whether Redis rehashes its keys (DEBUG HTSTATS: %v)", "history", err)
			return nil
		}
		if !strings.Contains(stats, "rehashing target") {
			if rounds > 0 {
				b.progress.linef("%-36s Redis's key table finished its rehash in %.1fs", "history", time.Since(began).Seconds())
			}
			return nil
		}
		if time.Since(began) > 10*time.Minute {
			return errors.New("redis still rehashes its keys after 10 minutes")
		}
		pipe := b.rdb.Pipeline()
		for range 10000 {
			pipe.Exists(ctx, "durable-bench:rehash")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redis EXISTS: %w", err)
		}
	}
}

// kvStreamBytes is the KV bucket stream's bytes.
func (b *Bench) kvStreamBytes(ctx context.Context) (int64, error) {
	st, err := b.js.Stream(ctx, kvStream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", kvStream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", kvStream, err)
	}
	return int64(info.State.Bytes), nil
}

// bytesDelta is the growth of measure over write.
func bytesDelta(ctx context.Context, measure func(context.Context) (int64, error), write func() error) (RunFootprint, error) {
	before, err := measure(ctx)
	if err != nil {
		return RunFootprint{}, err
	}
	if err := write(); err != nil {
		return RunFootprint{}, err
	}
	after, err := measure(ctx)
	if err != nil {
		return RunFootprint{}, err
	}
	return RunFootprint{Bytes: after - before}, nil
}
