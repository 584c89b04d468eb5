package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The step path reads and writes keys with core NATS requests, as the KV
// client does, but without its per-call work that the path does not need
// (request encoding, key regexp, timestamp parsing, entry objects): a step
// makes five reads and two writes, and that work showed in the worker's
// profile. Other writes go through jetstream.KeyValue, but no read: its
// Get is a direct get, which a lagging follower may answer: read a key
// with get.
//
// Reads are direct gets on a one-replica bucket and leader reads on a
// replicated one (see leaderGet): the step path acts on what it reads
// (a missing journal record is a model call made again), so it must read
// every write that was acknowledged before.

// entry is one read of a key: its newest message, or none.
type entry struct {
	value []byte
	// rev is the message's stream sequence; set for delete markers too.
	rev uint64
	// found is false for a missing key and for a delete or purge marker.
	found bool
}

// errWrongRevision: a conditional write found the key at another revision.
var errWrongRevision = errors.New("key at another revision")

// Headers the step path reads or sends.
const (
	hdrStatus      = "Status"
	hdrDescription = "Description"
	hdrSequence    = "Nats-Sequence"
	hdrSubject     = "Nats-Subject"
	hdrOperation   = "KV-Operation"
	hdrMarker      = "Nats-Marker-Reason"
	hdrExpectedSeq = "Nats-Expected-Last-Subject-Sequence"
	hdrRollup      = "Nats-Rollup"
	hdrTTL         = "Nats-TTL"
	hdrTimeStamp   = "Nats-Time-Stamp"
	hdrNumPending  = "Nats-Num-Pending"
	hdrUpToSeq     = "Nats-UpTo-Sequence"
)

// noResponderRetries and noResponderWait ride out a stream leader change
// on a write, as the JetStream client does.
const (
	noResponderRetries = 2
	noResponderWait    = 250 * time.Millisecond
)

// inProcessRetries bounds the times a write is sent again after the
// stream leader of a replicated bucket answered "wrong last sequence"
// without a sequence (10164): another write of the key is in process,
// proposed but not yet applied, and the leader cannot check the
// expectation against it. That write may still fail, and the leader
// keeps a key in process for a moment after it acks the write, so the
// answer says nothing about the key: it is sent again after
// inProcessWait(attempt), and only a refusal that persists is taken for
// a conflict.
const inProcessRetries = 6

// inProcessWait is the pause before the attempt-th resend: 1, 2, 4 … ms,
// about the time a proposal takes to apply.
func inProcessWait(attempt int) time.Duration { return time.Millisecond << attempt }

// inProcess reports whether e is the leader's "the key is in process"
// answer, which stores nothing.
func inProcess(e *jetstream.APIError) bool {
	return e != nil && e.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// bounded gives a request of the store its own deadline (the store's
// Timeout) when ctx has none: a request JetStream drops, as it does while
// a replicated bucket has no leader, would otherwise wait forever, and the
// CLI's contexts have no deadline.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// getLast reads the newest message on any key matching filter (wildcards
// allowed) and returns its subject: one direct get when the bucket allows
// them (s.directGet set), otherwise one leader read.
func (s *Store) getLast(ctx context.Context, filter string) (string, entry, error) {
	if s.directGet == "" {
		return s.leaderGet(ctx, filter)
	}
	rctx, cancel := s.bounded(ctx)
	msg, err := s.nc.RequestWithContext(rctx, s.directGet+filter, nil)
	cancel()
	if err != nil {
		return "", entry{}, fmt.Errorf("read newest of %s: %w", filter, err)
	}
	e, err := directEntry(msg)
	if err != nil {
		return "", entry{}, fmt.Errorf("read newest of %s: %w", filter, err)
	}
	return msg.Header.Get(hdrSubject), e, nil
}

// get reads key: one direct get when the bucket allows them, otherwise
// one leader read.
func (s *Store) get(ctx context.Context, key string) (entry, error) {
	if s.directGet == "" {
		_, e, err := s.leaderGet(ctx, key)
		return e, err
	}
	rctx, cancel := s.bounded(ctx)
	msg, err := s.nc.RequestWithContext(rctx, s.directGet+key, nil)
	cancel()
	if err != nil {
		return entry{}, fmt.Errorf("read %s: %w", key, err)
	}
	e, err := directEntry(msg)
	if err != nil {
		return entry{}, fmt.Errorf("read %s: %w", key, err)
	}
	return e, nil
}

// msgGetReply is the JetStream API's answer to STREAM.MSG.GET.
type msgGetReply struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Header  []byte `json:"hdrs,omitempty"`
		Data    []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// leaderGet reads the newest message on any key matching filter with
// STREAM.MSG.GET, which only the stream's leader answers, and only once
// it has applied every write it acknowledged (nats-server: the request
// handler checks the raft node's leader state, which a new leader takes
// once it has processed its log up to the commit index). A direct get is
// answered by any replica, followers included, and a follower can lag
// the writes its leader acknowledged. On a one-replica stream the two
// read the same store.
func (s *Store) leaderGet(ctx context.Context, filter string) (string, entry, error) {
	fail := func(err error) (string, entry, error) {
		return "", entry{}, fmt.Errorf("read newest of %s: %w", filter, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{s.subjects + filter})
	if err != nil {
		return fail(err)
	}
	msg, err := s.nc.RequestWithContext(ctx, s.msgGet, req)
	if err != nil {
		return fail(err)
	}
	var reply msgGetReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return fail(fmt.Errorf("decode reply %q: %w", msg.Data, err))
	}
	switch m := reply.Message; {
	case reply.Error != nil && reply.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return "", entry{}, nil
	case reply.Error != nil:
		return fail(reply.Error)
	case m == nil || m.Seq == 0:
		return fail(fmt.Errorf("reply without a message: %q", msg.Data))
	case len(m.Header) > 0:
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return fail(fmt.Errorf("headers of seq %d: %w", m.Seq, err))
		}
		if h.Get(hdrOperation) != "" || h.Get(hdrMarker) != "" {
			return m.Subject, entry{rev: m.Seq}, nil
		}
	}
	return reply.Message.Subject, entry{value: reply.Message.Data, rev: reply.Message.Seq, found: true}, nil
}

// directEntry reads a direct get's reply.
func directEntry(msg *nats.Msg) (entry, error) {
	if status := msg.Header.Get(hdrStatus); status != "" {
		if status == "404" {
			return entry{}, nil
		}
		return entry{}, fmt.Errorf("status %s %s", status, msg.Header.Get(hdrDescription))
	}
	rev, err := strconv.ParseUint(msg.Header.Get(hdrSequence), 10, 64)
	if err != nil {
		return entry{}, fmt.Errorf("sequence header %q", msg.Header.Get(hdrSequence))
	}
	if msg.Header.Get(hdrOperation) != "" || msg.Header.Get(hdrMarker) != "" {
		return entry{rev: rev}, nil // KV-Operation is only sent on DEL and PURGE
	}
	return entry{value: msg.Data, rev: rev, found: true}, nil
}

// pubAck is the reply to a JetStream publish.
type pubAck struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Seq   uint64              `json:"seq"`
}

// anyRevision makes put write whatever the key holds.
const anyRevision = ^uint64(0)

// put writes value on key if the key's newest revision is rev (0: the key
// has no message at all, not even a delete marker; anyRevision: whatever
// it holds) and returns the new revision. A refusal wraps errWrongRevision.
func (s *Store) put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return s.publish(ctx, key, s.putMsg(key, value, rev), rev)
}

// publish sends msg, a write of key (expecting its revision rev, for the
// error), and returns the new revision. A refusal for another revision
// wraps errWrongRevision.
func (s *Store) publish(ctx context.Context, key string, msg *nats.Msg, rev uint64) (uint64, error) {
	for attempt := 0; ; attempt++ {
		ack, err := s.send(ctx, key, msg)
		if err != nil {
			return 0, err
		}
		if inProcess(ack.Error) && rev != anyRevision && attempt < inProcessRetries {
			if err := sleep(ctx, inProcessWait(attempt)); err != nil {
				return 0, fmt.Errorf("write %s: %w", key, err)
			}
			continue
		}
		if ack.Error != nil {
			if ack.Error.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || inProcess(ack.Error) {
				return 0, fmt.Errorf("write %s at revision %d: %w: %w", key, rev, errWrongRevision, ack.Error)
			}
			return 0, fmt.Errorf("write %s: %w", key, ack.Error)
		}
		if ack.Seq == 0 {
			return 0, fmt.Errorf("write %s: ack without a sequence", key)
		}
		return ack.Seq, nil
	}
}

// send sends msg, a write of key, riding out a stream leader change,
// and decodes the stream's answer.
func (s *Store) send(ctx context.Context, key string, msg *nats.Msg) (pubAck, error) {
	var reply *nats.Msg
	var err error
	for attempt := 0; ; attempt++ {
		rctx, cancel := s.bounded(ctx)
		reply, err = s.nc.RequestMsgWithContext(rctx, msg)
		cancel()
		if !errors.Is(err, nats.ErrNoResponders) || attempt == noResponderRetries {
			break
		}
		if serr := sleep(ctx, noResponderWait); serr != nil {
			return pubAck{}, fmt.Errorf("write %s: %w", key, err)
		}
	}
	if err != nil {
		return pubAck{}, fmt.Errorf("write %s: %w", key, err)
	}
	var ack pubAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return pubAck{}, fmt.Errorf("write %s: decode ack %q: %w", key, reply.Data, err)
	}
	return ack, nil
}

// create writes value on key if the key has no value, over a delete
// marker too (as jetstream.KeyValue.Create does): only a key with a
// value refuses, wrapping errWrongRevision.
func (s *Store) create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := s.put(ctx, key, value, 0)
	if !errors.Is(err, errWrongRevision) {
		return rev, err
	}
	e, gerr := s.get(ctx, key)
	if gerr != nil || e.found || e.rev == 0 {
		return 0, err
	}
	return s.put(ctx, key, value, e.rev)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
