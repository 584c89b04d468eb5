package redisstore

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the scripts of concurrent steps to Redis as pipelines: a
// worker with a hundred steps in flight makes one write and one read for
// many Loads and Commits instead of a round trip, a pool checkout and two
// system calls each, on both sides of the connection. go-redis has no
// automatic pipelining, hence this.
//
// There is no goroutine of its own: a call that finds fewer than
// maxFlushes pipelines in flight sends the queue itself; otherwise it
// waits in the queue, which the next pipeline to finish sends. A lone call
// is sent at once, so one step at a time pays no wait. Each script keeps
// its own atomicity; a pipeline only shares the trip.
type batcher struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	queue    []*scriptCall
	flushing int
}

const (
	// maxFlushes is how many pipelines may be in flight at once.
	maxFlushes = 4
	// maxPipeline bounds the calls of one pipeline.
	maxPipeline = 256
)

// scriptCall is a script (script, keys, args), a transaction of plain
// commands (multi) or one plain command (args alone), and its reply: the
// script's, EXEC's array, or the command's.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	multi  [][]any
	cmd    *redis.Cmd
	done   chan struct{}
}

// run evaluates script like script.Run, sharing a pipeline with the calls
// made at the same time. The reply is read from the returned command.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, &scriptCall{script: script, keys: keys, args: args, done: make(chan struct{})})
}

// tx runs commands as one MULTI/EXEC transaction, sharing a pipeline with
// the calls made at the same time. The reply is EXEC's array. Only for a
// single-node client: a cluster client routes MULTI and EXEC by no key.
func (b *batcher) tx(ctx context.Context, commands ...[]any) *redis.Cmd {
	return b.do(ctx, &scriptCall{multi: commands, done: make(chan struct{})})
}

// command runs one plain command, sharing a pipeline with the calls made
// at the same time (a Cluster client's pipeline routes it by its key).
func (b *batcher) command(ctx context.Context, args ...any) *redis.Cmd {
	return b.do(ctx, &scriptCall{args: args, done: make(chan struct{})})
}

func (b *batcher) do(ctx context.Context, c *scriptCall) *redis.Cmd {
	return b.doAll(ctx, c)[0]
}

// doAll queues calls together, so that they share a pipeline when it has
// room, and returns their replies in order.
func (b *batcher) doAll(ctx context.Context, calls ...*scriptCall) []*redis.Cmd {
	b.mu.Lock()
	b.queue = append(b.queue, calls...)
	if b.flushing < maxFlushes {
		b.flushing++
		batch := b.take()
		b.mu.Unlock()
		b.flush(batch)
		b.next()
	} else {
		b.mu.Unlock()
	}
	out := make([]*redis.Cmd, len(calls))
	for k, c := range calls {
		select {
		case <-c.done:
			out[k] = c.cmd
		case <-ctx.Done():
			// The call may still run; the caller treats this like a
			// timeout on the wire.
			out[k] = redis.NewCmd(ctx)
			out[k].SetErr(ctx.Err())
		}
	}
	return out
}

// take removes up to maxPipeline calls from the queue; b.mu is held.
func (b *batcher) take() []*scriptCall {
	n := min(len(b.queue), maxPipeline)
	batch := b.queue[:n:n]
	if n == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = b.queue[n:]
	}
	return batch
}

// next sends what queued up during a flush, on a goroutine so that the
// caller that flushed can return with its own reply.
func (b *batcher) next() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.flushing--
		return
	}
	batch := b.take()
	go func() {
		b.flush(batch)
		b.next()
	}()
}

// flush sends batch as one pipeline of EVALSHAs and transactions. A
// script Redis does not know (after a restart or SCRIPT FLUSH) is sent
// again with its source.
func (b *batcher) flush(batch []*scriptCall) {
	ctx := context.Background()
	if len(batch) == 1 && batch[0].script != nil {
		c := batch[0]
		c.cmd = c.script.Run(ctx, b.rdb, c.keys, c.args...)
		close(c.done)
		return
	}
	pipe := b.rdb.Pipeline()
	for _, c := range batch {
		switch {
		case c.script != nil:
			c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			continue
		case c.multi == nil:
			c.cmd = pipe.Do(ctx, c.args...)
			continue
		}
		pipe.Do(ctx, "MULTI")
		for _, args := range c.multi {
			pipe.Do(ctx, args...)
		}
		c.cmd = pipe.Do(ctx, "EXEC")
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for _, c := range batch {
		if err := c.cmd.Err(); err != nil && c.script != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			c.cmd = c.script.Run(ctx, b.rdb, c.keys, c.args...)
		}
		close(c.done)
	}
}
