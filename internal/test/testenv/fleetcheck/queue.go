package fleetcheck

import (
	"bufio"
	"context"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/queue"
)

// Queue is what the step stream's consumers still hold, and the dead
// letters.
type Queue struct {
	Pending     uint64 // messages not yet handed to a worker
	AckPending  uint64 // handed out and not acknowledged
	DeadLetters uint64
}

// Drained reports whether the consumers hold nothing.
func (q Queue) Drained() bool { return q.Pending == 0 && q.AckPending == 0 }

// ReadQueue sums the pending and unacknowledged messages of every consumer
// of the step stream, and counts the dead letters.
func ReadQueue(ctx context.Context, js jetstream.JetStream) (Queue, error) {
	var q Queue
	st, err := js.Stream(ctx, queue.StepStream)
	if err != nil {
		return q, err
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		c, err := st.Consumer(ctx, name)
		if err != nil {
			return q, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return q, err
		}
		q.Pending += info.NumPending
		q.AckPending += uint64(info.NumAckPending)
	}
	if err := names.Err(); err != nil {
		return q, err
	}
	d, err := js.Stream(ctx, queue.DLQStream)
	if err != nil {
		return q, err
	}
	info, err := d.Info(ctx)
	if err != nil {
		return q, err
	}
	q.DeadLetters = info.State.Msgs
	return q, nil
}

// WaitDrained reads the queue every interval until the consumers hold
// nothing or timeout has passed (the last acks land a moment after the
// last run ends), and returns the last reading.
func WaitDrained(ctx context.Context, js jetstream.JetStream, timeout, every time.Duration) (Queue, error) {
	deadline := time.Now().Add(timeout)
	for {
		q, err := ReadQueue(ctx, js)
		if err == nil && q.Drained() || time.Now().After(deadline) {
			return q, err
		}
		select {
		case <-ctx.Done():
			return q, ctx.Err()
		case <-time.After(every):
		}
	}
}

// ScanLogs calls fn with every line of the files at paths and the line's
// byte offset in its file; a file it cannot open is skipped.
func ScanLogs(paths []string, fn func(path string, off int64, line []byte)) {
	for _, p := range paths {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		var off int64
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			b := sc.Bytes()
			fn(p, off, b)
			off += int64(len(b)) + 1
		}
		fh.Close()
	}
}
