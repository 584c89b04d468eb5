package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Atomic batch publish (nats-server 2.12 or later, ADR-50): messages that
// carry one batch id and sequences 1..N are staged by the stream and
// stored all or none when the one marked as the commit arrives; their
// expected-sequence headers are checked at that moment, against the
// stream as it was before the batch. nats.go has no client for it, and a
// commit needs only these three headers.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// The server's answers a batch commit acts on (nats-server 2.15.2,
// server/jetstream_errors_generated.go). TestBatchServerAnswers holds the
// server to them.
const (
	// codeAtomicDisabled: the stream does not allow atomic publish.
	codeAtomicDisabled jetstream.ErrorCode = 10174
	// codeBatchIncomplete: the commit found no batch staged under its id,
	// as when the server refused the first message (too many batches in
	// flight on the stream) without a reply to give it to.
	codeBatchIncomplete jetstream.ErrorCode = 10176
	// codeBatchTooManyInflight: the stream holds 50 open batches.
	codeBatchTooManyInflight jetstream.ErrorCode = 10210
)

// batchRetries bounds the times a commit sends its batch again after a
// refusal that stored nothing and says nothing about the keys (too many
// batches in flight, or no stream leader for the moment).
const batchRetries = 5

// batchAck is the answer to a batch's commit message: the PubAck of its
// last message, naming the batch and its size, or an error.
type batchAck struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Seq   uint64              `json:"seq"`
	Batch string              `json:"batch"`
	Count int                 `json:"count"`
}

// commitBatch stores cp's document and run's as one atomic batch:
//
//  1. cp.<R>.<n>, expected last subject sequence 0 (no message at all),
//  2. run.<R>, expected last subject sequence run.Rev, the commit.
//
// Both land or neither. When a check fails, one read of the checkpoint
// key says which (see refusedBy); a checkpoint of an earlier generation,
// or a delete marker, is written over by sending the batch again with
// its sequence expected instead of 0.
func (s *Store) commitBatch(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint, cpDoc, runDoc []byte) (checkpoint.Run, error) {
	key := cpKey(run.ID, cp.Step)
	var cpRev uint64 // the checkpoint key's sequence the batch expects
	transient := 0
	for range maxSettleRetries {
		ack, err := s.publishBatch(ctx, key, cpRev, cpDoc, runKey(run.ID), run.Rev, runDoc)
		if errors.Is(err, nats.ErrNoResponders) && transient < batchRetries {
			// No stream leader for the moment: nothing was stored.
			transient++
			if err := sleep(ctx, noResponderWait); err != nil {
				return checkpoint.Run{}, err
			}
			continue
		}
		if err != nil {
			// No answer: the batch may or may not be stored, but not half
			// of it. The caller retries the step, whose Load finds out.
			return checkpoint.Run{}, err
		}
		if ack.Error == nil {
			run.Rev = ack.Seq
			return run, nil
		}
		switch ack.Error.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			if cpRev, err = s.refusedBy(ctx, key, cp.Gen, cpRev, run.ID); err != nil {
				return checkpoint.Run{}, err
			}
		case codeBatchIncomplete, codeBatchTooManyInflight:
			if transient == batchRetries {
				return checkpoint.Run{}, fmt.Errorf("batch refused %d times: %w", transient+1, ack.Error)
			}
			transient++
			if err := sleep(ctx, time.Duration(transient)*10*time.Millisecond); err != nil {
				return checkpoint.Run{}, err
			}
		case codeAtomicDisabled:
			// Someone rewrote the bucket's stream config (a KV update
			// drops allow_atomic). Nothing was stored: commit in two writes
			// from now on, as on a server without atomic batches.
			s.batches.Store(false)
			return s.commitTwoWrites(ctx, run, cp, cpDoc, runDoc)
		default:
			return checkpoint.Run{}, ack.Error
		}
	}
	return checkpoint.Run{}, fmt.Errorf("checkpoint %s still contended after %d attempts", key, maxSettleRetries)
}

// refusedBy finds out which expectation of a refused batch failed, from
// the checkpoint key as it is now (cpRev: the sequence the batch expected
// on it). A checkpoint of generation gen or later: ErrCheckpointExists,
// reported before anything about the run, as the Store contract says.
// One of an earlier generation, or a delete marker, that the batch did
// not expect: its sequence, for the next batch to write over. Otherwise
// the checkpoint's expectation held and the run's failed: ErrNotFound or
// ErrConflict (whyRefused).
//
// The key's generation only grows, so a stored generation below gen is
// an attempt that no run adopted, and writing over it is what the
// two-write commit does too (writeCheckpoint).
func (s *Store) refusedBy(ctx context.Context, key string, gen int, cpRev uint64, runID string) (uint64, error) {
	e, err := s.get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("batch refused, checkpoint %s not read: %w", key, err)
	}
	if e.found {
		stored, err := checkpointGen(key, e.value)
		if err != nil {
			return 0, err
		}
		if stored >= gen {
			return 0, checkpoint.ErrCheckpointExists
		}
	}
	if e.rev != cpRev {
		return e.rev, nil
	}
	return 0, s.whyRefused(ctx, runID, 0)
}

// publishBatch sends the two messages of a commit on one connection,
// which keeps them in order, and waits for the commit's answer: one round
// trip. The first message asks for no reply; were it refused (too many
// batches in flight), the commit finds no batch and says so.
func (s *Store) publishBatch(ctx context.Context, cpKey string, cpRev uint64, cpDoc []byte, runKey string, runRev uint64, runDoc []byte) (batchAck, error) {
	id := nuid.Next() // 22 characters; the server takes up to 64
	first := &nats.Msg{
		Subject: s.putPrefix + cpKey,
		Header: nats.Header{
			hdrBatchID:     []string{id},
			hdrBatchSeq:    []string{"1"},
			hdrExpectedSeq: []string{strconv.FormatUint(cpRev, 10)},
		},
		Data: cpDoc,
	}
	commit := &nats.Msg{
		Subject: s.putPrefix + runKey,
		Header: nats.Header{
			hdrBatchID:     []string{id},
			hdrBatchSeq:    []string{"2"},
			hdrBatchCommit: []string{"1"},
			hdrExpectedSeq: []string{strconv.FormatUint(runRev, 10)},
		},
		Data: runDoc,
	}
	if err := s.nc.PublishMsg(first); err != nil {
		return batchAck{}, fmt.Errorf("write %s: %w", cpKey, err)
	}
	rctx, cancel := s.bounded(ctx)
	reply, err := s.nc.RequestMsgWithContext(rctx, commit)
	cancel()
	if err != nil {
		return batchAck{}, fmt.Errorf("write %s and %s: %w", cpKey, runKey, err)
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return batchAck{}, fmt.Errorf("write %s and %s: decode ack %q: %w", cpKey, runKey, reply.Data, err)
	}
	if ack.Error != nil {
		return ack, nil
	}
	if ack.Seq == 0 {
		return batchAck{}, fmt.Errorf("write %s and %s: ack without a sequence: %q", cpKey, runKey, reply.Data)
	}
	if ack.Batch != id || ack.Count != 2 {
		if err := s.notBatched(ctx, cpKey, cpDoc, reply.Data); err != nil {
			return batchAck{}, err
		}
	}
	return ack, nil
}

// notBatched handles a success answer that is not a batch's: a stream
// leader older than nats-server 2.12 (a cluster in the middle of an
// upgrade) ignores the batch headers and stores both messages as plain
// writes, each with its own check, and the answer is the run's PubAck.
// The store stops sending batches. The run was written; the commit
// stands (as a two-write commit) only if the checkpoint key holds this
// commit's document.
func (s *Store) notBatched(ctx context.Context, cpKey string, cpDoc, answer []byte) error {
	s.batches.Store(false)
	e, err := s.get(ctx, cpKey)
	if err == nil && e.found && string(e.value) == string(cpDoc) {
		return nil
	}
	return fmt.Errorf("the server stored a commit's messages one by one (answer %q: a stream leader before nats-server 2.12?) and %s does not hold this commit's checkpoint: the run moved without it", answer, cpKey)
}

// checkpointGen reads the generation of the checkpoint document value.
func checkpointGen(key string, value []byte) (int, error) {
	var stored struct {
		Gen int `json:"gen"`
	}
	if err := unmarshal(value, &stored); err != nil {
		return 0, fmt.Errorf("checkpoint %s: %w", key, err)
	}
	return stored.Gen, nil
}

// stagesOnDisk reports whether nats-server stages the atomic batches of
// a stream with config cfg on disk: one replica, file storage. It keeps
// each batch in a file store of its own, created, synced and removed on
// the stream's one ingest goroutine (server/jetstream_batching.go,
// newBatchStore): about 4 ms a commit on this project's test VM, 250 a
// second per bucket, against 0.17 ms for a step's load and two writes
// (BenchmarkStep: File/batch against File/two-writes). A replicated or
// memory stream stages batches in memory, and there one batch costs no
// more than two writes (on a three-server cluster, less).
func stagesOnDisk(cfg jetstream.StreamConfig) bool {
	return cfg.Replicas <= 1 && cfg.Storage == jetstream.FileStorage
}

// enableBatches decides, once, whether this store's commits go as atomic
// batches when New found a bucket that should take them but does not
// allow them yet (a bucket made by an older version, or by the KV
// client, which cannot set allow_atomic): it turns allow_atomic on. Only
// a committing process (a worker) does, on its first commit, so that the
// processes that only read need no permission to update the stream.
//
// A server that refuses the update (no permission: it then never
// answers, and the update waits out the store's Timeout; an invalid
// config) or drops the field (a server before 2.12) leaves the store on
// two writes. Every process decides for itself, so in a fleet in the
// middle of an upgrade some commit one way and some the other; both keep
// the checkpoint key first-writer-wins and never move a run past a
// missing checkpoint, and the worker rolls forward a run that a
// two-write commit left behind.
func (s *Store) enableBatches(ctx context.Context) {
	s.enableOnce.Do(func() {
		if !s.mayEnable {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		info, err := s.stream.Info(ctx)
		if err != nil {
			return
		}
		cfg := info.Config
		if stagesOnDisk(cfg) {
			return
		}
		if !cfg.AllowAtomicPublish {
			cfg.AllowAtomicPublish = true
			updated, err := s.js.UpdateStream(ctx, cfg)
			if err != nil || !updated.CachedInfo().Config.AllowAtomicPublish {
				return
			}
		}
		s.batches.Store(true)
	})
}
