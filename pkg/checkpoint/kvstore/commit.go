package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Atomic batch publish headers (nats-server 2.12+, ADR-50). nats.go has no
// client API for them yet.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// Server error codes a commit handles; the rest are returned wrapped.
const (
	codeWrongLastSeq         jetstream.ErrorCode = 10071 // JSStreamWrongLastSequenceErr
	codeWrongLastSeqConstant jetstream.ErrorCode = 10164 // same, on replicated streams
	codeBatchIncomplete      jetstream.ErrorCode = 10176 // JSAtomicPublishIncompleteBatchErr
	codeBatchTooManyInflight jetstream.ErrorCode = 10210 // JSAtomicPublishTooManyInflight
)

// commitAttempts bounds retries of batches the server refused before
// looking at them (too many in flight, or staged incompletely).
const commitAttempts = 5

// batchAck is the reply to a batch's commit message: a PubAck for the last
// message of the batch, or an API error.
type batchAck struct {
	Error  *jetstream.APIError `json:"error,omitempty"`
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Batch  string              `json:"batch"`
	Count  int                 `json:"count"`
}

// Commit writes cp first-writer-wins together with run, provided run.Rev
// is still the run's KV revision. Both land in one JetStream atomic batch:
//
//  1. cp.<R>.<n> with Nats-Expected-Last-Subject-Sequence 0 (create-only)
//  2. run.<R> with Nats-Expected-Last-Subject-Sequence run.Rev, committing
//
// The server checks both expectations at commit and stores both or
// neither. The run's new revision is the sequence of the second message,
// which the commit's PubAck reports.
func (s *Store) Commit(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint) (checkpoint.Run, error) {
	if cp.RunID == "" {
		cp.RunID = run.ID
	}
	if err := checkCommit(run, cp); err != nil {
		return checkpoint.Run{}, err
	}
	fail := func(err error) (checkpoint.Run, error) {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d at rev %d: %w", run.ID, cp.Step, run.Rev, err)
	}
	// Expecting sequence 0 on the run would create a run that is not there.
	if run.Rev == 0 {
		return fail(s.whyRefused(ctx, run.ID, cp.Step))
	}
	runDoc, err := marshal(run)
	if err != nil {
		return fail(err)
	}
	cpDoc, err := marshal(cp)
	if err != nil {
		return fail(err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}

	for attempt := 1; ; attempt++ {
		ack, err := s.publishBatch(ctx, run, cp, runDoc, cpDoc)
		if err != nil {
			// No reply: the batch may or may not have landed. The caller
			// retries the step, whose Load then finds out.
			return fail(err)
		}
		if ack.Error == nil {
			if ack.Count != 2 || ack.Seq == 0 {
				return fail(fmt.Errorf("unexpected batch ack %+v", ack))
			}
			run.Rev = ack.Seq
			return run, nil
		}
		switch ack.Error.ErrorCode {
		case codeWrongLastSeq, codeWrongLastSeqConstant:
			return fail(s.whyRefused(ctx, run.ID, cp.Step))
		case codeBatchTooManyInflight, codeBatchIncomplete:
			// Refused before anything was stored: safe to send again.
			if attempt < commitAttempts {
				if err := sleep(ctx, time.Duration(attempt)*10*time.Millisecond); err != nil {
					return fail(err)
				}
				continue
			}
		}
		return fail(ack.Error)
	}
}

// publishBatch sends the two messages of a commit on one connection, which
// keeps them in order; only the committing message asks for a reply.
func (s *Store) publishBatch(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint, runDoc, cpDoc []byte) (batchAck, error) {
	id := nuid.Next() // 22 characters; the server allows up to 64
	first := &nats.Msg{
		Subject: s.subject(cpKey(run.ID, cp.Step)),
		Header: nats.Header{
			hdrBatchID:                          []string{id},
			hdrBatchSeq:                         []string{"1"},
			jetstream.ExpectedLastSubjSeqHeader: []string{"0"},
		},
		Data: cpDoc,
	}
	last := &nats.Msg{
		Subject: s.subject(runKey(run.ID)),
		Header: nats.Header{
			hdrBatchID:                          []string{id},
			hdrBatchSeq:                         []string{"2"},
			hdrBatchCommit:                      []string{"1"},
			jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(run.Rev, 10)},
		},
		Data: runDoc,
	}
	nc := s.conn()
	if err := nc.PublishMsg(first); err != nil {
		return batchAck{}, err
	}
	reply, err := nc.RequestMsgWithContext(ctx, last)
	if err != nil {
		return batchAck{}, err
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return batchAck{}, fmt.Errorf("decode batch ack %q: %w", reply.Data, err)
	}
	if ack.Error == nil && ack.Batch != id {
		return batchAck{}, fmt.Errorf("batch ack for %q, sent %q", ack.Batch, id)
	}
	return ack, nil
}

func checkCommit(run checkpoint.Run, cp checkpoint.Checkpoint) error {
	if err := readID(run.ID); err != nil {
		return fmt.Errorf("commit checkpoint: %w", err)
	}
	if cp.RunID != run.ID {
		return fmt.Errorf("commit checkpoint %s:%d: checkpoint belongs to run %q", run.ID, cp.Step, cp.RunID)
	}
	if cp.Step < 1 {
		return fmt.Errorf("commit checkpoint %s:%d: steps count from 1", run.ID, cp.Step)
	}
	return nil
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
