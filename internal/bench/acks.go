package bench

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ackWatcher tells when a system finished its steps, without asking the
// system anything: it subscribes to the JetStream ack subjects of one
// consumer on core NATS and counts the acks the worker sends. A worker
// acks step n only after its output is durable and step n+1 is
// published, and it acks the last step of a run after the run is
// committed as completed; so when W*9 distinct messages were acked, the W
// runs completed, at the time of the last ack. This costs the servers one
// extra core-NATS delivery per step and no store reads, it is the same
// method for the floor and both of durable's stores, and it timestamps the
// last completion exactly instead of to a polling interval. Each phase
// then verifies in the store (outside the timed span) that every run
// really completed.
type ackWatcher struct {
	sub              *nats.Subscription
	stream, consumer string

	mu      sync.Mutex
	seen    map[uint64]struct{} // stream sequences acked, over all phases
	count   int                 // distinct acks since the last expect
	target  int
	reached chan time.Time
}

// watchAcks subscribes to the acks of consumer on stream.
func watchAcks(nc *nats.Conn, stream, consumer string) (*ackWatcher, error) {
	w := &ackWatcher{stream: stream, consumer: consumer, seen: map[uint64]struct{}{}}
	sub, err := nc.Subscribe("$JS.ACK.>", w.onAck)
	if err != nil {
		return nil, fmt.Errorf("watch acks of %s/%s: %w", stream, consumer, err)
	}
	// One consumer's acks must never be dropped as a slow consumer.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	w.sub = sub
	return w, nil
}

func (w *ackWatcher) close() { _ = w.sub.Unsubscribe() }

// expect resets the count and returns a channel that receives the time of
// the n-th distinct ack from now on.
func (w *ackWatcher) expect(n int) <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.count, w.target = 0, n
	w.reached = make(chan time.Time, 1)
	return w.reached
}

// counted returns the acks counted since the last expect.
func (w *ackWatcher) counted() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

func (w *ackWatcher) onAck(m *nats.Msg) {
	now := time.Now()
	// An ack is "+ACK" or an empty body; -NAK, +WPI, +TERM and +NXT are not.
	if len(m.Data) > 0 && !bytes.HasPrefix(m.Data, []byte("+ACK")) {
		return
	}
	stream, consumer, seq, ok := parseAckSubject(m.Subject)
	if !ok || stream != w.stream || consumer != w.consumer {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.seen[seq]; dup {
		return // a redelivered message acked again
	}
	w.seen[seq] = struct{}{}
	w.count++
	if w.reached != nil && w.count >= w.target {
		w.reached <- now
		w.reached = nil
	}
}

// parseAckSubject reads stream, consumer and stream sequence from an ack
// subject: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>,
// or the v2 form with <domain>.<account hash> before the stream and
// possibly more tokens at the end.
func parseAckSubject(subject string) (stream, consumer string, seq uint64, ok bool) {
	t := strings.Split(subject, ".")
	var i int
	switch {
	case len(t) == 9:
		i = 2
	case len(t) >= 11:
		i = 4
	default:
		return "", "", 0, false
	}
	seq, err := strconv.ParseUint(t[i+3], 10, 64)
	if err != nil {
		return "", "", 0, false
	}
	return t[i], t[i+1], seq, true
}
