package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// The counts of ended runs (see the package doc, "Run indexes"). A run's
// entry in an ended status is counted once, by the process whose write
// put the run there, in that process's shard, and uncounted by the one
// that takes it out (a redrive, a purge):
//
//	run.=ix.c.<P>   shard of process P: {"c": {"<status>.<wf>": n}}, the
//	                sum of what P added and removed since it began the shard
//	run.=ix.c.=     the base: {"c": …, "f": {"<P>": seq}, "at": unix ms},
//	                the counts of the shards folded into it (f: their
//	                sequences, which a reader skips) and the recount's
//	                corrections
//
// A count is the base plus every shard not folded: one read of the keys
// under run.=ix.c., statuses × workflows × processes writing, whatever
// the bucket holds. A shard has one writer, which writes it whole (no
// compare-and-set, no read) after each record write that moves a run
// into or out of an ended status, in the order it changed it (one
// connection keeps them): a lost write is made good by the next. A
// process idle for shardRotate starts a new shard, so that the
// scheduler's recount may fold one idle for foldAfter into the base and
// delete it without its writer writing it again.
//
// A crash between a record write and its shard's write, or an upgrade
// from a version that did not count, leaves a count off: the recount
// (maintainCounts, which the scheduler's index maintenance calls)
// counts the entries of every ended listing (countPrefix, 0.4 µs an
// entry) every recountEvery, and corrects a status and workflow whose
// difference it found twice, confirmAfter apart, with no shard write to
// it during either count (a write in flight, a stale entry, a marker
// that has not expired, a purge under way differ from one count to the
// next).
const (
	countPrefixKey = ixPrefix + "c."
	countBaseKey   = countPrefixKey + "="
	shardRotate    = 10 * time.Minute
	foldAfter      = time.Hour
	recountEvery   = time.Hour
	confirmAfter   = 2 * time.Minute
)

// countDelta is one change to a count: n runs of workflow wf (a token)
// into (1) or out of (-1) ended status st.
type countDelta struct {
	st checkpoint.Status
	wf string
	n  int64
}

func endedStatus(st checkpoint.Status) bool { return slices.Contains(endedStatuses, st) }

// tombPair counts the tombstones kept, in the same keys as the ended runs
// (no status is named so): a purge that leaves a tombstone adds one in
// its shard, and the recount counts the tombstones' count entries, which
// expire with them. A base written before tombstones were counted lacks
// it until the first recount of a version that counts them: Tombstones
// counts the entries until then.
var tombPair = pairKey(tombDelta.st, tombDelta.wf)

// tombDelta is the count of one tombstone more.
var tombDelta = countDelta{st: "=tomb", n: 1}

func pairKey(st checkpoint.Status, wf string) string { return string(st) + "." + wf }

// endedDeltas are the changes to the counts of a write that moves a run
// of workflow wf from status from (counted: the record before had index
// entries) to status to.
func endedDeltas(from checkpoint.Status, counted bool, to checkpoint.Status, wf, fromWF string) []countDelta {
	var d []countDelta
	if counted && endedStatus(from) {
		d = append(d, countDelta{from, fromWF, -1})
	}
	if endedStatus(to) {
		d = append(d, countDelta{to, wf, 1})
	}
	return d
}

// countShard is this process's shard of the counts.
type countShard struct {
	mu   sync.Mutex
	id   string
	vals map[string]int64
	last time.Time
	// sent is the newest write of the shard, nil before the first.
	sent *shardWrite
}

// shardWrite is a write of a shard, which several callers may wait for:
// a future's answer is received once.
type shardWrite struct {
	f    jetstream.PubAckFuture
	once sync.Once
	done chan struct{}
	err  error
}

func (w *shardWrite) finish(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// polled stops a wait at once: a poll.
var polled = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// wait waits for the write's answer until ctx ends (ok: answered).
func (w *shardWrite) wait(ctx context.Context) (ok bool, err error) {
	if ok, err = w.settle(ctx.Done()); !ok {
		return false, ctx.Err()
	}
	return ok, err
}

// poll is wait that does not wait: false while the write is in flight
// (a poll may miss an answer that just came).
func (w *shardWrite) poll() (ok bool, err error) { return w.settle(polled) }

// settle waits for the write's outcome until stop is closed: false when
// stop came first.
func (w *shardWrite) settle(stop <-chan struct{}) (ok bool, err error) {
	select {
	case <-w.done:
	case <-w.f.Ok():
		w.finish(nil)
	case err := <-w.f.Err():
		w.finish(err)
	case <-stop:
		return false, nil
	}
	<-w.done
	return true, w.err
}

// add applies deltas to the shard and writes it, without waiting.
func (s *Store) countAdd(deltas []countDelta) {
	if len(deltas) == 0 || s.loseCounts {
		return
	}
	c := &s.counts
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id == "" || (time.Since(c.last) > shardRotate && c.sentOK()) {
		c.id, c.vals = nuid.Next(), map[string]int64{}
	}
	for _, d := range deltas {
		c.vals[pairKey(d.st, d.wf)] += d.n
	}
	c.last = time.Now()
	c.write(s)
}

// sentOK reports whether the newest write of the shard is stored (none
// failed that a later one did not make good).
func (c *countShard) sentOK() bool {
	if c.sent == nil {
		return true
	}
	ok, err := c.sent.poll()
	return ok && err == nil
}

// write sends the shard whole; c.mu held.
func (c *countShard) write(s *Store) {
	doc, err := marshal(countDoc{C: c.vals})
	if err != nil {
		return
	}
	f, err := s.js.PublishMsgAsync(s.putMsg(countPrefixKey+c.id, doc, anyRevision))
	if err == nil {
		c.sent = &shardWrite{f: f, done: make(chan struct{})}
	}
}

// flush waits until the newest write of the shard is stored, and writes
// it again once if it failed.
func (s *Store) countFlush(ctx context.Context) error {
	c := &s.counts
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		f := c.sent
		c.mu.Unlock()
		if f == nil {
			return nil
		}
		rctx, cancel := s.bounded(ctx)
		_, err := f.wait(rctx)
		cancel()
		if err == nil || attempt == 1 {
			return err
		}
		c.mu.Lock()
		if c.sent == f {
			c.write(s)
		}
		c.mu.Unlock()
	}
}

// countDoc is the value of a shard or of the base.
type countDoc struct {
	C map[string]int64 `json:"c"`
	// The base only: F, the shards folded into it, at the sequence
	// folded; At, when the last recount ended; D and DAt, the
	// differences the last recount found and did not correct yet, and
	// when.
	F   map[string]uint64 `json:"f,omitempty"`
	At  int64             `json:"at,omitempty"`
	D   map[string]int64  `json:"d,omitempty"`
	DAt int64             `json:"dat,omitempty"`
}

// countKeys is what the keys under run.=ix.c. hold.
type countKeys struct {
	base    *countDoc
	baseRev uint64
	shards  map[string]ixMsg
	docs    map[string]countDoc
}

func (s *Store) readCountKeys(ctx context.Context) (countKeys, error) {
	msgs, err := s.readSharded(ctx, []string{countPrefixKey + "*"})
	if err != nil {
		return countKeys{}, err
	}
	k := countKeys{shards: map[string]ixMsg{}, docs: map[string]countDoc{}}
	for _, m := range msgs {
		if m.marker {
			continue
		}
		var doc countDoc
		if err := unmarshal(m.value, &doc); err != nil {
			return countKeys{}, fmt.Errorf("%s: %w", m.key, err)
		}
		if m.key == countBaseKey {
			k.base, k.baseRev = &doc, m.seq
			continue
		}
		id := strings.TrimPrefix(m.key, countPrefixKey)
		k.shards[id], k.docs[id] = m, doc
	}
	return k, nil
}

// sums are the counts the keys hold: the base and the shards not folded
// into it.
func (k countKeys) sums() map[string]int64 {
	out := map[string]int64{}
	if k.base != nil {
		for p, n := range k.base.C {
			out[p] += n
		}
	}
	for id, m := range k.shards {
		if k.base != nil && k.base.F[id] >= m.seq {
			continue
		}
		for p, n := range k.docs[id].C {
			out[p] += n
		}
	}
	return out
}

// countEnded reads the counts of the ended runs: from the count keys, or,
// on a bucket without a base yet (written by a version that did not
// count, until the scheduler's first recount), by counting the entries.
func (s *Store) countEnded(ctx context.Context) (map[string]int64, error) {
	if err := s.countFlush(ctx); err != nil {
		return nil, err
	}
	k, err := s.readCountKeys(ctx)
	if err != nil {
		return nil, err
	}
	if k.base == nil {
		return s.recountEnded(ctx)
	}
	return k.sums(), nil
}

// recountEnded counts the entries of each ended listing by status and
// workflow, as the server counts the subjects under each (countPrefix):
// 0.4 µs an entry.
func (s *Store) recountEnded(ctx context.Context) (map[string]int64, error) {
	names, err := s.readSharded(ctx, []string{ixPrefix + "n.*"})
	if err != nil {
		return nil, err
	}
	var pairs []countDelta
	for _, st := range endedStatuses {
		for _, wf := range append([]string{noWorkflow}, workflowNames(names)...) {
			pairs = append(pairs, countDelta{st: st, wf: wf})
		}
	}
	pairs = append(pairs, countDelta{st: tombDelta.st})
	err = parallel(len(pairs), func(i int) error {
		filter := tombFilter
		if pairs[i].st != tombDelta.st {
			filter = statusList(pairs[i].st, pairs[i].wf).entryFilter()
		}
		n, err := s.countPrefix(ctx, filter)
		pairs[i].n = n
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, p := range pairs {
		if k := pairKey(p.st, p.wf); p.n != 0 || k == tombPair {
			out[k] = p.n // the tombstones' pair even at 0: they are counted
		}
	}
	return out, nil
}

// initCounts writes an empty base on a bucket New just created: no run
// was written before it, so the shards count every one.
func (s *Store) initCounts(ctx context.Context) error {
	doc, err := marshal(countDoc{C: map[string]int64{tombPair: 0}, At: time.Now().UnixMilli()})
	if err != nil {
		return err
	}
	_, err = s.create(ctx, countBaseKey, doc)
	if errors.Is(err, errWrongRevision) {
		return nil
	}
	return err
}

// maintainCounts recounts the ended runs when the last recount is
// recountEvery old (or a difference waits to be confirmed, or there is
// no base), corrects the base, and folds into it the shards idle for
// foldAfter, which it then deletes. Of schedulers doing it at once one
// writes the base (compare-and-set); the others' work is lost.
func (s *Store) maintainCounts(ctx context.Context) error {
	return s.maintainCountsAt(ctx, time.Now())
}

func (s *Store) maintainCountsAt(ctx context.Context, now time.Time) error {
	before, err := s.readCountKeys(ctx)
	if err != nil {
		return err
	}
	b := before.base
	if b != nil && len(b.D) == 0 && now.Sub(time.UnixMilli(b.At)) < recountEvery {
		return nil
	}
	counted, err := s.recountEnded(ctx)
	if err != nil {
		return err
	}
	after, err := s.readCountKeys(ctx)
	if err != nil {
		return err
	}
	if (after.base == nil) != (b == nil) || (b != nil && after.baseRev != before.baseRev) {
		return nil // another recount wrote the base meanwhile
	}
	next := correct(b, before.sums(), after.sums(), counted, now)
	folded := fold(&next, after, now)
	doc, err := marshal(next)
	if err != nil {
		return err
	}
	if b == nil {
		_, err = s.create(ctx, countBaseKey, doc)
	} else {
		_, err = s.put(ctx, countBaseKey, doc, after.baseRev)
	}
	if errors.Is(err, errWrongRevision) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.purgeKeys(ctx, folded)
}

// correct is the base after a recount that counted counted, the keys
// summing to s1 before it and s2 after: a status and workflow whose
// difference is the one the last recount found, confirmAfter ago or
// more, and no shard wrote to during either count, is corrected; the
// other differences are kept for the next recount to confirm. Without a
// base (nothing counted before) every difference is taken.
func correct(b *countDoc, s1, s2, counted map[string]int64, now time.Time) countDoc {
	next := countDoc{C: map[string]int64{}, F: map[string]uint64{}, D: map[string]int64{}}
	if b != nil {
		for p, n := range b.C {
			next.C[p] = n
		}
		for id, seq := range b.F {
			next.F[id] = seq
		}
	}
	pairs := map[string]bool{}
	for _, m := range []map[string]int64{s1, s2, counted} {
		for p := range m {
			pairs[p] = true
		}
	}
	confirmed := b != nil && now.Sub(time.UnixMilli(b.DAt)) >= confirmAfter
	for p := range pairs {
		d := counted[p] - s2[p]
		switch {
		case d == 0 || s1[p] != s2[p]:
		case b == nil || (confirmed && b.D[p] == d):
			next.C[p] += d
		default:
			next.D[p] = d
		}
	}
	if _, ok := next.C[tombPair]; !ok {
		// A base from before tombstones were counted: take the count.
		next.C[tombPair] = counted[tombPair] - s2[tombPair]
		delete(next.D, tombPair)
	}
	next.At, next.DAt = now.UnixMilli(), now.UnixMilli()
	if b != nil && len(b.D) > 0 && !confirmed {
		next.DAt = b.DAt // confirmed confirmAfter after the pass that found it
	}
	return next
}

// fold adds to next the shards of k idle for foldAfter, which no process
// writes again (a writer idle for shardRotate starts another), and
// returns their keys, to delete; it forgets the folded shards already
// deleted.
func fold(next *countDoc, k countKeys, now time.Time) []string {
	var keys []string
	for id, m := range k.shards {
		if next.F[id] >= m.seq || now.Sub(m.at) < foldAfter {
			continue
		}
		for p, n := range k.docs[id].C {
			next.C[p] += n
		}
		next.F[id] = m.seq
		keys = append(keys, countPrefixKey+id)
	}
	for id := range next.F {
		if _, ok := k.shards[id]; !ok {
			delete(next.F, id)
		}
	}
	return keys
}
