package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The index is read with the stream's direct get API (JSApiMsgGetRequest,
// nats-server 2.11+), whose requests cost, on a KV stream (one message
// per subject; server/stream.go getDirectRequest, getDirectMulti,
// filestore.go):
//
//   - multi_last (the newest message of each subject matching a few
//     filters) finds every matching subject in the stream's subject
//     index, then each one's message in the block the index names: the
//     cost of the subjects under the filters' prefixes, wherever they lie
//     in the stream. It refuses (413) more than 1024 subjects. Every
//     read of the index is one, on narrow prefixes: a directory (at most
//     64 keys), a few leaves (16 ms each), a shard of a live listing, the
//     workflow names, and the records of a page (literal keys).
//   - a batch ("next_by_subj" with "batch") counts what matches its filter
//     first (a walk of the subject index), then looks for each next match
//     block by block from its start, reading every block in between (the
//     subject index is not used once it holds 64k subjects): the cost of
//     the stream from the first match on. Only a leaf of more than 1024
//     entries is read so, and the backfill, which reads every record.
//   - neither reads backwards, and the leader-only STREAM.MSG.GET takes no
//     batch: newest first comes from the time tries, not from the stream.
//
// Counts come from an ephemeral consumer's pending count (countPrefix).
// On a replicated bucket any replica answers a direct get, and a
// follower can lag its leader: a read of the index there is checked
// against the leader's last sequence (readLast) or goes through scan's
// watcher (readPrefix), and records are read from the leader
// (readRecords).

// ixMsg is one message read from the index, or a run record.
type ixMsg struct {
	key   string // the key, without "$KV.<bucket>."
	seq   uint64
	at    time.Time // when the server stored it
	value []byte
	// marker: a delete or purge marker (a removed entry); ttl: one
	// that expires.
	marker, ttl bool
}

// errTooMany: a multi_last read matched more than the 1024 subjects the
// server returns at once.
var errTooMany = errors.New("too many subjects for one read")

// readBatch is the size of one batch read; a listing larger than that
// takes a read per batch.
const readBatch = 10000

// directRead sends req to the stream's direct get API and collects the
// answer: the messages and the header of the end of batch (nil for a
// single message). No message at all is no error.
//
// The answer comes on a subscription of its own, with a callback: a
// synchronous subscription allocates a channel of 65,536 messages, which
// costs more than the read.
func (s *Store) directRead(ctx context.Context, req any) ([]ixMsg, nats.Header, error) {
	msgs, eob, err := s.directReadOnce(ctx, req)
	if s.onRead != nil && err == nil {
		s.onRead(msgs)
	}
	return msgs, eob, err
}

func (s *Store) directReadOnce(ctx context.Context, req any) ([]ixMsg, nats.Header, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, err
	}
	var (
		mu   sync.Mutex
		got  []*nats.Msg
		end  = make(chan struct{})
		once sync.Once
	)
	sub, err := s.nc.Subscribe(s.nc.NewInbox(), func(msg *nats.Msg) {
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
		_, batch := msg.Header[hdrNumPending]
		if msg.Header.Get(hdrStatus) != "" || !batch {
			once.Do(func() { close(end) })
		}
	})
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, nil, err
	}
	if err := s.nc.PublishRequest(s.directAPI, sub.Subject, body); err != nil {
		return nil, nil, err
	}
	rctx, cancel := s.bounded(ctx)
	defer cancel()
	select {
	case <-end:
	case <-rctx.Done():
		return nil, nil, fmt.Errorf("direct get: %w", rctx.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	var out []ixMsg
	for _, msg := range got {
		switch status := msg.Header.Get(hdrStatus); status {
		case "":
		case "204": // end of batch
			return out, msg.Header, nil
		case "404":
			return out, nil, nil
		case "413":
			return nil, nil, errTooMany
		default:
			return nil, nil, fmt.Errorf("direct get: status %s %s", status, msg.Header.Get(hdrDescription))
		}
		m, err := readMsg(s.subjects, msg)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, m)
	}
	return out, nil, nil // a single message
}

func readMsg(subjects string, msg *nats.Msg) (ixMsg, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(hdrSequence), 10, 64)
	if err != nil {
		return ixMsg{}, fmt.Errorf("direct get: sequence header %q", msg.Header.Get(hdrSequence))
	}
	at, _ := time.Parse(time.RFC3339Nano, msg.Header.Get(hdrTimeStamp))
	m := ixMsg{key: strings.TrimPrefix(msg.Header.Get(hdrSubject), subjects), seq: seq, at: at, value: msg.Data}
	m.marker = msg.Header.Get(hdrOperation) != "" || msg.Header.Get(hdrMarker) != ""
	m.ttl = msg.Header.Get(hdrTTL) != ""
	return m, nil
}

func headerUint(h nats.Header, key string) uint64 {
	n, _ := strconv.ParseUint(h.Get(key), 10, 64)
	return n
}

// readPrefix reads the newest message of every key matching filter, in
// stream order: on a one-replica bucket in batches (see above for what
// they cost), markers included; on a replicated one through scan (puts
// only).
func (s *Store) readPrefix(ctx context.Context, filter string) ([]ixMsg, error) {
	if s.directAPI == "" || s.leaderReads {
		var out []ixMsg
		err := s.scan(ctx, filter, func(e jetstream.KeyValueEntry) error {
			out = append(out, ixMsg{key: e.Key(), seq: e.Revision(), at: e.Created(), value: e.Value()})
			return nil
		})
		return out, err
	}
	var out []ixMsg
	var from uint64
	for {
		req := map[string]any{"next_by_subj": s.subjects + filter, "batch": readBatch}
		if from > 0 {
			req["seq"] = from
		}
		msgs, eob, err := s.directRead(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filter, err)
		}
		out = append(out, msgs...)
		if len(msgs) == 0 || eob == nil || headerUint(eob, hdrNumPending) == 0 {
			return out, nil
		}
		from = msgs[len(msgs)-1].seq + 1
	}
}

// batchReads reports whether readFrom may be used: direct gets answered
// by the one replica there is.
func (s *Store) batchReads() bool { return s.directAPI != "" && !s.leaderReads }

// readFrom reads up to n messages on keys matching filter in stream
// order from sequence from (one direct get batch; see above for what it
// costs), markers included, and returns the sequence to go on from and
// whether more follow. Only where batchReads.
func (s *Store) readFrom(ctx context.Context, filter string, from uint64, n int) (msgs []ixMsg, next uint64, more bool, err error) {
	req := map[string]any{"next_by_subj": s.subjects + filter, "batch": n}
	if from > 0 {
		req["seq"] = from
	}
	msgs, eob, err := s.directRead(ctx, req)
	if err != nil {
		return nil, 0, false, fmt.Errorf("read %s: %w", filter, err)
	}
	if len(msgs) == 0 {
		return nil, from, false, nil
	}
	return msgs, msgs[len(msgs)-1].seq + 1, eob != nil && headerUint(eob, hdrNumPending) > 0, nil
}

// readLast reads the newest message of every key matching any of
// filters, at most 1024 keys (errTooMany beyond). On a replicated bucket
// the replica that answers must have applied everything the leader had
// stored when the read began.
func (s *Store) readLast(ctx context.Context, filters []string) ([]ixMsg, error) {
	if s.directAPI == "" {
		var out []ixMsg
		for _, f := range filters {
			msgs, err := s.readPrefix(ctx, f)
			if err != nil {
				return nil, err
			}
			if out = append(out, msgs...); len(out) > maxResults {
				return nil, errTooMany
			}
		}
		return out, nil
	}
	full := make([]string, len(filters))
	for i, f := range filters {
		full[i] = s.subjects + f
	}
	var leader uint64
	if s.leaderReads {
		info, err := s.stream.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filters[0], err)
		}
		leader = info.State.LastSeq
	}
	for attempt := 1; ; attempt++ {
		msgs, eob, err := s.directRead(ctx, map[string]any{"multi_last": full})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filters[0], err)
		}
		switch {
		case !s.leaderReads, eob != nil && headerUint(eob, hdrUpToSeq) >= leader:
			return msgs, nil
		case eob == nil:
			// Nothing matched (404), an answer without the replica's
			// sequence: nothing matches on the leader either, or the
			// replica lags.
			empty, err := s.leaderHasNone(ctx, filters)
			if err != nil || empty {
				return nil, err
			}
		}
		if attempt == scanAttempts {
			return nil, fmt.Errorf("read %s: the replica answering is behind its leader (sequence %d) after %d tries", filters[0], leader, attempt)
		}
		if err := sleep(ctx, time.Duration(attempt)*10*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// leaderHasNone reports whether no key matches any of filters on the
// stream's leader.
func (s *Store) leaderHasNone(ctx context.Context, filters []string) (bool, error) {
	var some atomic.Bool
	err := each(filters, func(f string) error {
		_, e, err := s.leaderGet(ctx, f)
		if e.rev != 0 {
			some.Store(true)
		}
		return err
	})
	return !some.Load(), err
}

// readSharded reads the newest message of every key matching filters
// (multi_last), as many filters at once as fit in one answer: a read
// refused for more than 1024 keys is split in two, and a filter that
// matches more than 1024 on its own is read in batches (readPrefix).
func (s *Store) readSharded(ctx context.Context, filters []string) ([]ixMsg, error) {
	msgs, err := s.readLast(ctx, filters)
	switch {
	case !errors.Is(err, errTooMany):
		return msgs, err
	case len(filters) == 1:
		return s.readPrefix(ctx, filters[0])
	}
	half := len(filters) / 2
	a, err := s.readSharded(ctx, filters[:half])
	if err != nil {
		return nil, err
	}
	b, err := s.readSharded(ctx, filters[half:])
	return append(a, b...), err
}

// countPrefix counts the keys matching filter, markers of removed
// entries included (until they expire), reading none: the pending count
// of an ephemeral consumer on filter, which the server takes from the
// stream's subject index (a walk of the subjects under the filter's
// prefix) when it creates the consumer. A direct get batch would report
// the same count with its first message, but finding that message loads
// the block that holds the listing's oldest entry: a block read from
// disk per count.
func (s *Store) countPrefix(ctx context.Context, filter string) (int64, error) {
	rctx, cancel := s.bounded(ctx)
	defer cancel()
	c, err := s.stream.CreateConsumer(rctx, jetstream.ConsumerConfig{
		FilterSubject:     s.subjects + filter,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", filter, err)
	}
	info := c.CachedInfo()
	_ = s.stream.DeleteConsumer(context.WithoutCancel(rctx), info.Name)
	return int64(info.NumPending), nil
}

// record is a run record as read, with what it says of its index entries;
// or, when tomb is set, the tombstone of a purged run (run holds its id,
// workflow and status, and Rev).
type record struct {
	run  checkpoint.Run
	ix   *ixState
	tomb *tombDoc
}

// recordOf decodes the value of run.<id> stored at rev.
func recordOf(id string, value []byte, rev uint64) (record, error) {
	if isTomb(value) {
		t, err := decodeTomb(value)
		if err != nil {
			return record{}, fmt.Errorf("read %s: %w", runKey(id), err)
		}
		return record{run: checkpoint.Run{ID: id, Workflow: t.Workflow, Status: t.Status, Rev: rev}, tomb: &t}, nil
	}
	run, ix, err := decodeStored(id, value, rev)
	if err != nil {
		return record{}, fmt.Errorf("read %s: %w", runKey(id), err)
	}
	return record{run: run, ix: ix}, nil
}

// readRecords reads the records of ids: on a one-replica bucket up to
// 1024 in one read, on a replicated one from the leader, many at once.
// A missing run is absent from the answer; a purged one is its
// tombstone (record.tomb).
func (s *Store) readRecords(ctx context.Context, ids []string) (map[string]record, error) {
	out := make(map[string]record, len(ids))
	var missing []string
	if s.directAPI != "" && !s.leaderReads {
		for start := 0; start < len(ids); start += maxResults {
			chunk := ids[start:min(start+maxResults, len(ids))]
			filters := make([]string, len(chunk))
			for i, id := range chunk {
				filters[i] = s.subjects + runKey(id)
			}
			msgs, _, err := s.directRead(ctx, map[string]any{"multi_last": filters})
			if err != nil {
				return nil, fmt.Errorf("read runs: %w", err)
			}
			for _, m := range msgs {
				if m.marker {
					continue
				}
				id := strings.TrimPrefix(m.key, "run.")
				rec, err := recordOf(id, m.value, m.seq)
				if err != nil {
					return nil, err
				}
				out[id] = rec
			}
		}
		// An answer stops at the server's byte limit: read the rest one
		// by one (those really missing too, which is rare).
		for _, id := range ids {
			if _, ok := out[id]; !ok {
				missing = append(missing, id)
			}
		}
	} else {
		missing = ids
	}
	var mu sync.Mutex
	err := each(missing, func(id string) error {
		e, err := s.get(ctx, runKey(id))
		if err != nil || !e.found {
			return err
		}
		rec, err := recordOf(id, e.value, e.rev)
		if err != nil {
			return err
		}
		mu.Lock()
		out[id] = rec
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	return out, nil
}
