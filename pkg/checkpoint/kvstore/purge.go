package kvstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Retention (checkpoint.Retention; see the package doc, "Retention").

var _ checkpoint.Retention = (*Store)(nil)

// tombDoc is what the tombstone of a purged run keeps, times in unix ms:
// run.<R> holds {"_tomb": tombDoc}, which no run record starts with.
type tombDoc struct {
	Workflow string            `json:"w"`
	Status   checkpoint.Status `json:"s"`
	Ended    int64             `json:"e"`
	Purged   int64             `json:"p"`
	// Expires is when the tombstone's message TTL ends it. 0: the
	// tombstone of a purge that keeps none, which holds the id while the
	// purge deletes the run's keys and is deleted last.
	Expires int64 `json:"x,omitempty"`
}

func (t tombDoc) of(id string) checkpoint.Tombstone {
	return checkpoint.Tombstone{ID: id, Workflow: t.Workflow, Status: t.Status,
		EndedAt: time.UnixMilli(t.Ended).UTC(), PurgedAt: time.UnixMilli(t.Purged).UTC()}
}

const tombPrefix = `{"_tomb":`

func isTomb(value []byte) bool { return bytes.HasPrefix(value, []byte(tombPrefix)) }

func encodeTomb(t tombDoc) ([]byte, error) {
	return marshal(struct {
		T tombDoc `json:"_tomb"`
	}{t})
}

func decodeTomb(value []byte) (tombDoc, error) {
	var doc struct {
		T tombDoc `json:"_tomb"`
	}
	err := unmarshal(value, &doc)
	return doc.T, err
}

// tombError is the *checkpoint.PurgedError of run id, whose record is
// the tombstone value.
func tombError(id string, value []byte) error {
	t, err := decodeTomb(value)
	if err != nil {
		return fmt.Errorf("tombstone of %s: %w", id, err)
	}
	return &checkpoint.PurgedError{Tombstone: t.of(id)}
}

// tombKey is the index key that counts the tombstone of run id
// (Tombstones), and expires with it.
func tombKey(id string) string { return ixPrefix + "t." + id }

const tombFilter = ixPrefix + "t.*"

// EndedBefore walks the time listings of the ended statuses (all
// workflows) oldest first, up to cutoff, merges them and reads the
// records the earliest limit entries name: what it reads grows with
// limit (and the entries it skips: a run that left its status, a purge
// that did not finish), not with the runs kept. The walk removes the
// directories of the listings that purges emptied (see trieSource), so
// that the next walk does not read them again.
//
// When it finds fewer than limit runs (the listings are read up to the
// cutoff: a retention pass is done), it sweeps the other listings a run
// has entries in (see sweep), at most once a minute.
//
// An entry whose record is a tombstone is a purge under way, or one that
// stopped before its end (its status entries go last): EndedBefore
// finishes it once the tombstone is finishAfter old, and leaves it to
// its purger until then.
func (s *Store) EndedBefore(ctx context.Context, cutoff time.Time, limit int) ([]checkpoint.Run, error) {
	if limit < 1 {
		return nil, fmt.Errorf("ended runs: limit %d, want at least 1", limit)
	}
	heads := make([]*endedHead, len(endedStatuses))
	for i, st := range endedStatuses {
		l := statusList(st, "")
		heads[i] = &endedHead{l: l, src: s.ascending(l, cutoff.UnixMilli())}
	}
	var out []checkpoint.Run
	seen := map[string]bool{}
	for len(out) < limit {
		batch, err := mergeEarliest(ctx, heads, limit-len(out))
		if err != nil {
			return nil, fmt.Errorf("ended runs: %w", err)
		}
		if len(batch) == 0 {
			break
		}
		ids := make([]string, len(batch))
		for i, le := range batch {
			ids[i] = le.e.id
		}
		recs, err := s.readRecords(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("ended runs: %w", err)
		}
		now := time.Now()
		for _, le := range batch {
			rec, ok := recs[le.e.id]
			switch {
			case ok && le.l.names(le.e, rec):
				if !seen[le.e.id] && len(out) < limit {
					seen[le.e.id] = true
					s.runs.put(rec.run.ID, baseOf(rec.run, rec.ix))
					out = append(out, rec.run)
				}
			case ok && rec.tomb != nil && now.Sub(time.UnixMilli(rec.tomb.Purged)) >= s.finishAfter:
				if err := s.finishPurge(ctx, le.e.id, *rec.tomb, nil, []string{le.e.key}); err != nil {
					return nil, fmt.Errorf("ended runs: finish the purge of %s: %w", le.e.id, err)
				}
			case !ok || rec.tomb == nil:
				s.dropStale(le.l, le.e, rec, ok, now)
			}
		}
	}
	if len(out) < limit && s.sweepDue() {
		_ = s.sweep(ctx, cutoff.UnixMilli()) // removes what is empty: the next sweep goes on
	}
	return out, nil
}

// sweepEvery bounds how often a store sweeps; sweepBudget is how many
// entries a sweep reads in one listing before it stops: the runs kept
// before the cutoff, at the start of a listing, that a sweep reads every
// time (the oldest live runs; the runs created before the cutoff that
// ended after it, which move on with the cutoff). A listing with more of
// them keeps the directories behind the budget until they go.
const (
	sweepEvery  = time.Minute
	sweepBudget = 10000
)

// sweepDue reports whether this store has not swept for sweepEvery, and
// if so takes the turn.
func (s *Store) sweepDue() bool {
	last := s.swept.Load()
	now := time.Now().UnixNano()
	return now-last >= int64(sweepEvery) && s.swept.CompareAndSwap(last, now)
}

// sweep walks, oldest first up to before, each workflow's listing by
// creation: EndedBefore walks the ended statuses only (of every
// workflow at once, which removes the emptied directories of each), and
// the directories that purges emptied in the listings by creation would
// stay for good otherwise (a newest-first walk reaches them only on a
// page that far back). Each walk reads its listing's oldest entries, up
// to sweepBudget, and removes on the way the directories it finds empty
// (see trieSource): what a sweep costs grows with the runs kept before
// the cutoff, at most sweepBudget for each listing, and with what it
// removes, once, not with the runs purged before.
func (s *Store) sweep(ctx context.Context, before int64) error {
	names, err := s.readSharded(ctx, []string{ixPrefix + "n.*"})
	if err != nil {
		return err
	}
	var lists []ixList
	for _, wf := range append([]string{noWorkflow}, workflowNames(names)...) {
		lists = append(lists, workflowList(wf))
	}
	return parallel(len(lists), func(i int) error {
		_, err := s.ascending(lists[i], before).next(ctx, sweepBudget)
		return err
	})
}

// finishAfter is how old a tombstone whose run still has status entries
// must be for EndedBefore to finish its purge: a purge takes a few
// requests, so the purger has stopped.
const finishAfter = time.Minute

// endedHead is one listing of EndedBefore's merge: its source and the
// entries read from it not merged yet.
type endedHead struct {
	l    ixList
	src  entrySource
	buf  []ixEntry
	done bool
}

type listedEntry struct {
	l ixList
	e ixEntry
}

// mergeEarliest takes up to n entries from heads, the earliest first
// (by time, then id), reading each listing as far as the merge needs.
func mergeEarliest(ctx context.Context, heads []*endedHead, n int) ([]listedEntry, error) {
	var out []listedEntry
	for len(out) < n {
		var first *endedHead
		for _, h := range heads {
			if len(h.buf) == 0 && !h.done {
				got, err := h.src.next(ctx, n-len(out))
				if err != nil {
					return nil, err
				}
				h.buf, h.done = got, len(got) == 0
			}
			if len(h.buf) > 0 && (first == nil || earlier(h.buf[0], first.buf[0])) {
				first = h
			}
		}
		if first == nil {
			break
		}
		out = append(out, listedEntry{first.l, first.buf[0]})
		first.buf = first.buf[1:]
	}
	return out, nil
}

// earlier orders entries oldest first: by time, then by id.
func earlier(a, b ixEntry) bool {
	if a.ms != b.ms {
		return a.ms < b.ms
	}
	return a.id < b.id
}

// Purge deletes run (see the package doc, "Retention"):
//
//  1. the tombstone replaces the record, compare-and-set on run.Rev:
//     from here on the run is purged (GetRun, Load, CreateRun, a commit
//     answer so), and of schedulers purging at once one wins;
//  2. every other key of the run, as the stream lists its subjects, and
//     its creation entries, are purged (finishPurge), and meanwhile the
//     tombstone's count entry is written (tombstoneTTL > 0);
//  3. the tombstone is purged when it keeps none (tombstoneTTL 0: the
//     id is free);
//  4. its status entries are purged, last: until then EndedBefore lists
//     the run, reads the tombstone, and finishes a purge that stopped.
func (s *Store) Purge(ctx context.Context, run checkpoint.Run, tombstoneTTL time.Duration) error {
	if err := readID(run.ID); err != nil {
		return fmt.Errorf("purge run: %w", err)
	}
	fail := func(err error) error {
		return fmt.Errorf("purge run %s at rev %d: %w", run.ID, run.Rev, err)
	}
	if !run.Status.Terminal() {
		return fail(fmt.Errorf("it is %s, not ended", run.Status))
	}
	if run.Rev == 0 {
		return fail(s.whyRefused(ctx, run.ID, 0))
	}
	b, ok, err := s.loadBase(ctx, run.ID, run.Rev)
	switch {
	case err != nil:
		return fail(err)
	case b == nil:
		return fail(checkpoint.ErrNotFound)
	case !ok:
		return fail(s.whyRefused(ctx, run.ID, 0))
	case !b.status.Terminal():
		return fail(fmt.Errorf("the stored run is %s, not ended", b.status))
	}
	now := time.Now()
	t := tombDoc{Workflow: b.workflow, Status: b.status, Ended: b.updated.UnixMilli(), Purged: now.UnixMilli()}
	if tombstoneTTL > 0 {
		t.Expires = now.Add(tombstoneTTL).UnixMilli()
	}
	if err := s.writeTomb(ctx, run.ID, b.rev, t); err != nil {
		return fail(err)
	}
	s.runs.forget(run.ID)
	var deltas []countDelta
	if b.ix != nil {
		deltas = endedDeltas(b.status, true, "", "", wfToken(b.workflow))
	}
	if t.Expires > 0 {
		deltas = append(deltas, tombDelta)
	}
	s.countAdd(deltas)
	if s.afterTomb != nil {
		s.afterTomb(ctx)
	}
	var created, status []string
	if b.ix != nil {
		wf := wfToken(b.workflow)
		created, _ = creationEntries(wf, b.created.UnixMilli(), run.ID, b.ix.C)
		status, _ = statusEntries(b.status, wf, b.ix.At, run.ID, b.ix.N)
	}
	if err := s.finishPurge(ctx, run.ID, t, created, status); err != nil {
		return fail(err)
	}
	return nil
}

// writeTomb replaces the record of run id at revision rev with the
// tombstone t, whose message expires at t.Expires.
func (s *Store) writeTomb(ctx context.Context, id string, rev uint64, t tombDoc) error {
	doc, err := encodeTomb(t)
	if err != nil {
		return err
	}
	for range 2 {
		msg := s.putMsg(runKey(id), doc, rev)
		if t.Expires > 0 {
			msg.Header.Set(hdrTTL, ttlUntil(t.Expires))
		}
		_, err = s.publish(ctx, runKey(id), msg, rev)
		var apiErr *jetstream.APIError
		switch {
		case errors.Is(err, errWrongRevision):
			return s.whyRefused(ctx, id, 0)
		case errors.As(err, &apiErr) && apiErr.ErrorCode == codeTTLDisabled && s.allowsTTL(ctx):
			continue // turned on since New read the config: try again
		case errors.As(err, &apiErr) && apiErr.ErrorCode == codeTTLDisabled:
			return fmt.Errorf("the bucket's stream does not allow message TTLs, which tombstones expire with (a bucket made before nats-server 2.11 or by an older version: a worker's first commit turns them on): %w", err)
		}
		return err
	}
	return err
}

// codeTTLDisabled: a message with a TTL on a stream that allows none
// (nats-server, JSMessageTTLDisabledErr).
const codeTTLDisabled jetstream.ErrorCode = 10166

// allowsTTL reads again whether the stream allows message TTLs.
func (s *Store) allowsTTL(ctx context.Context) bool {
	rctx, cancel := s.bounded(ctx)
	defer cancel()
	info, err := s.stream.Info(rctx)
	if err != nil {
		return false
	}
	s.ttl.Store(info.Config.AllowMsgTTL)
	return info.Config.AllowMsgTTL
}

// ttlUntil is a Nats-TTL header value that ends a message at expires
// (unix ms): whole seconds, at least one.
func ttlUntil(expires int64) string {
	secs := (expires - time.Now().UnixMilli() + 999) / 1000
	return strconv.FormatInt(max(secs, 1), 10) + "s"
}

// finishPurge deletes what is left of run id once its record is the
// tombstone t: its keys and created (its creation entries, when known),
// writing the tombstone's count entry meanwhile (or deleting the
// tombstone after them when it keeps none), then status (its status
// entries), last. Each step can be done again: EndedBefore calls it
// again for a purge that stopped, from its status entry.
//
// Four round trips: the listing of the run's keys, with the count entry
// and the markers of the creation entries; the markers of the keys (all
// published at once, each rolls up its key and expires after markerTTL);
// the tombstone's purge when it keeps none; the purges of the status
// entries, once the rest is gone.
//
// A marker rather than the purge API for the keys: the server takes API
// requests one after another, each decoded, routed and answered, while
// the markers are published without waiting on each and stored in the
// stream's own loop. BenchmarkPurgeRuns: 1,900-2,100 claims-9 runs/s
// against 1,120-1,490 with a purge request per key, 750-820 CPU-µs a run
// (client and server) against 1,150-1,500 (docs/performance.md). A late
// writer meets the tombstone either way (TestLateWriterAfterPurge).
func (s *Store) finishPurge(ctx context.Context, id string, t tombDoc, created, status []string) error {
	var keys []string
	err := parallel(2, func(i int) error {
		if i == 0 {
			var err error
			keys, err = s.runKeys(ctx, id)
			return err
		}
		var msgs []*nats.Msg
		if t.Expires > 0 {
			msg := s.putMsg(tombKey(id), nil, anyRevision)
			msg.Header = nats.Header{hdrTTL: []string{ttlUntil(t.Expires)}}
			msgs = append(msgs, msg)
		}
		return s.dropEntries(ctx, created, msgs...)
	})
	if err != nil {
		return err
	}
	if err := s.dropEntries(ctx, keys); err != nil {
		return err
	}
	if t.Expires == 0 {
		if err := s.purgeKeys(ctx, []string{runKey(id)}); err != nil {
			return err
		}
	}
	// The status entries with the purge API: a marker would count in
	// CountRuns until it expires.
	return s.purgeKeys(ctx, status)
}

// dropEntries removes keys of a purged run and waits:
// with markers that expire (one publish each, all at once, with the
// other writes msgs), or, where the stream allows no message TTLs (the
// marker would stay), with the stream's purge API.
func (s *Store) dropEntries(ctx context.Context, keys []string, msgs ...*nats.Msg) error {
	if !s.ttl.Load() {
		if err := s.purgeKeys(ctx, keys); err != nil {
			return err
		}
		keys = nil
	}
	for _, k := range keys {
		msgs = append(msgs, s.markerMsg(k, 0))
	}
	if len(msgs) == 0 {
		return nil
	}
	return s.publishAll(ctx, msgs)
}

// runKeys lists the keys of run id but its record: every subject
// "*.<R>.>" of the stream (checkpoints, journals, failures, branch keys,
// spend, its audit, approval and blob logs), as the stream's leader has
// them, from its subject index (no message is read), and alive.<R> and
// due.<R> (see sideKeys).
func (s *Store) runKeys(ctx context.Context, id string) ([]string, error) {
	var keys []string
	var info *jetstream.StreamInfo
	err := parallel(2, func(i int) error {
		if i == 0 {
			var err error
			keys, err = s.sideKeys(ctx, id)
			return err
		}
		rctx, cancel := s.bounded(ctx)
		defer cancel()
		var err error
		info, err = s.stream.Info(rctx, jetstream.WithSubjectFilter(s.subjects+"*."+id+".>"))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list the keys of %s: %w", id, err)
	}
	for subject := range info.State.Subjects {
		key := strings.TrimPrefix(subject, s.subjects)
		switch kind, _, _ := strings.Cut(key, "."); kind {
		case "cp", "j", "f", "sp", "run": // not wf.<name>.<version> of a workflow named like the run
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// sideKeys are alive.<R> and due.<R>: on a one-replica bucket those that
// have a message (one direct get of both, cheaper than a purge of each),
// on a replicated one both (a follower answering the get may lag).
func (s *Store) sideKeys(ctx context.Context, id string) ([]string, error) {
	keys := []string{aliveKey(id), dueKey(id)}
	if s.directAPI == "" || s.leaderReads {
		return keys, nil
	}
	msgs, err := s.readLast(ctx, keys)
	if err != nil {
		return nil, err
	}
	keys = keys[:0]
	for _, m := range msgs {
		keys = append(keys, m.key)
	}
	return keys, nil
}

// purgeKeys deletes every message of each key with the stream's purge
// API (filtered on the key: the subject's messages only, found through
// the subject index), which leaves no marker: nothing of the key stays.
// A key without messages costs the request only. One filter with a
// wildcard for many keys would be one request, but the server reads every
// message from the first match to the last in each block that holds one
// (fileStore.PurgeEx), and other runs' keys lie between a run's: see
// docs/performance.md, "History at scale". When ctx has no deadline, one
// bounds them all: the store's Timeout for each wave of indexWriters
// requests (a context each, a timer and a lock on the caller's context,
// cost the client about as much as the request).
func (s *Store) purgeKeys(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		waves := (len(keys) + indexWriters - 1) / indexWriters
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(waves)*s.timeout)
		defer cancel()
	}
	return each(keys, func(key string) error {
		reply, err := s.nc.RequestWithContext(ctx, s.purgeAPI, []byte(`{"filter":"`+s.subjects+key+`"}`))
		if err != nil {
			return fmt.Errorf("purge %s: %w", key, err)
		}
		return purgeAnswer(key, reply.Data)
	})
}

// purgeDone is in every answer of a purge that succeeded, and in no
// refusal (whose "success" is false).
var purgeDone = []byte(`"success":true`)

// purgeAnswer reads the answer to the purge of key: a success is found
// without decoding it.
func purgeAnswer(key string, data []byte) error {
	if bytes.Contains(data, purgeDone) && !bytes.Contains(data, []byte(`"error"`)) {
		return nil
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Success bool                `json:"success"`
	}
	if err := unmarshal(data, &resp); err != nil {
		return fmt.Errorf("purge %s: %w", key, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("purge %s: %w", key, resp.Error)
	}
	if !resp.Success {
		return fmt.Errorf("purge %s: refused: %q", key, data)
	}
	return nil
}

// Tombstones counts the tombstones kept, from the count keys (tombPair):
// what it reads grows with the processes writing, not with the
// tombstones. A tombstone that expired counts until the scheduler's next
// recount (hourly). On a bucket whose counts do not hold the tombstones
// yet (written by a version that did not count them, until its first
// recount), it counts their count entries (tombKey), as the server
// counts the subjects under their prefix (countPrefix): about 0.4 µs a
// tombstone.
func (s *Store) Tombstones(ctx context.Context) (int64, error) {
	fail := func(err error) (int64, error) { return 0, fmt.Errorf("count tombstones: %w", err) }
	if err := s.countFlush(ctx); err != nil {
		return fail(err)
	}
	k, err := s.readCountKeys(ctx)
	if err != nil {
		return fail(err)
	}
	if k.base != nil {
		if _, ok := k.base.C[tombPair]; ok {
			return max(0, k.sums()[tombPair]), nil
		}
	}
	n, err := s.countPrefix(ctx, tombFilter)
	if err != nil {
		return fail(err)
	}
	return n, nil
}
