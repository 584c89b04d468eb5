package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
//  2. the run's new index entries and the markers that remove its old
//     ones, when the commit changes its status (see plan),
//  3. run.<R>, expected last subject sequence run.Rev, the commit.
//
// All land or none. When a check fails, one read of the checkpoint key
// says which (see refusedBy); a checkpoint of an earlier generation, or
// a delete marker, is written over by sending the batch again with its
// sequence expected instead of 0.
func (s *Store) commitBatch(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint, cpDoc []byte) (checkpoint.Run, error) {
	key := cpKey(run.ID, cp.Step)
	b, ok, err := s.loadBase(ctx, run.ID, run.Rev)
	if err != nil {
		return checkpoint.Run{}, err
	}
	if !ok {
		// The run moved (or is missing): the batch would be refused.
		_, err := s.refusedBy(ctx, key, cp.Gen, ^uint64(0), run.ID)
		return checkpoint.Run{}, err
	}
	w := s.plan(b, run)
	runDoc, err := encodeRun(run, w.ix)
	if err != nil {
		return checkpoint.Run{}, err
	}
	var cpRev uint64 // the checkpoint key's sequence the batch expects
	for range maxSettleRetries {
		msgs := append([]*nats.Msg{s.putMsg(key, cpDoc, cpRev)}, s.indexMsgs(w)...)
		msgs = append(msgs, s.putMsg(runKey(run.ID), runDoc, run.Rev))
		seq, apiErr, err := s.sendBatch(ctx, msgs)
		if err != nil {
			// No answer: the batch may or may not be stored, but not half
			// of it. The caller retries the step, whose Load finds out.
			return checkpoint.Run{}, err
		}
		if apiErr == errNotBatched {
			if err := s.notBatched(ctx, key, cpDoc); err != nil {
				return checkpoint.Run{}, err
			}
			apiErr = nil
		}
		if apiErr == nil {
			return s.wroteRun(run, seq, w), nil
		}
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			if cpRev, err = s.refusedBy(ctx, key, cp.Gen, cpRev, run.ID); err != nil {
				return checkpoint.Run{}, err
			}
		case codeAtomicDisabled:
			// Someone rewrote the bucket's stream config (a KV update
			// drops allow_atomic). Nothing was stored: commit in two writes
			// from now on, as on a server without atomic batches.
			s.batches.Store(false)
			return s.commitTwoWrites(ctx, run, cp, cpDoc)
		default:
			return checkpoint.Run{}, apiErr
		}
	}
	return checkpoint.Run{}, fmt.Errorf("checkpoint %s still contended after %d attempts", key, maxSettleRetries)
}

// wroteRun is run as stored at rev by a write that did w to the index.
func (s *Store) wroteRun(run checkpoint.Run, rev uint64, w ixWrite) checkpoint.Run {
	run.Rev = rev
	s.wrote(w)
	s.countAdd(w.counts)
	s.runs.put(run.ID, baseOf(run, w.ix))
	return run
}

// putMsg writes value on key if the key's newest revision is rev (0: no
// message at all; anyRevision: whatever it holds).
func (s *Store) putMsg(key string, value []byte, rev uint64) *nats.Msg {
	msg := &nats.Msg{Subject: s.putPrefix + key, Data: value}
	if rev != anyRevision {
		msg.Header = nats.Header{hdrExpectedSeq: []string{strconv.FormatUint(rev, 10)}}
	}
	return msg
}

// indexMsgs are the messages of w: its new entries and directories, and
// the markers that remove the entries the record no longer names.
func (s *Store) indexMsgs(w ixWrite) []*nats.Msg {
	msgs := make([]*nats.Msg, 0, len(w.puts)+len(w.late)+len(w.drops))
	for _, k := range append(w.puts, w.late...) {
		msgs = append(msgs, s.putMsg(k, []byte("1"), anyRevision))
	}
	for _, k := range w.drops {
		msgs = append(msgs, s.markerMsg(k, 0))
	}
	return msgs
}

// errNotBatched is sendBatch's answer when a server before 2.12 stored
// the messages of a batch one by one, each with its own check; the
// sequence is the last one's. The store sends no more batches.
var errNotBatched = &jetstream.APIError{Description: "batch stored message by message"}

// sendBatch sends msgs as one atomic batch, riding out the refusals that
// store nothing and say nothing about the keys: no stream leader for the
// moment, too many batches in flight, a key in process (see
// inProcessRetries). It returns the commit's sequence, or the server's
// refusal (errNotBatched: no refusal, but no batch either).
func (s *Store) sendBatch(ctx context.Context, msgs []*nats.Msg) (uint64, *jetstream.APIError, error) {
	var noLeader, crowded, inProcessTries int
	for {
		ack, err := s.publishBatch(ctx, msgs)
		if errors.Is(err, nats.ErrNoResponders) && noLeader < batchRetries {
			noLeader++
			if err := sleep(ctx, noResponderWait); err != nil {
				return 0, nil, err
			}
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		if ack.Error == nil {
			if ack.Batch == "" || ack.Count != len(msgs) {
				// A stream leader before nats-server 2.12 stored the
				// messages one by one: the answer is the last one's.
				s.batches.Store(false)
				return ack.Seq, errNotBatched, nil
			}
			return ack.Seq, nil, nil
		}
		var wait time.Duration
		switch {
		case inProcess(ack.Error) && inProcessTries < inProcessRetries:
			wait = inProcessWait(inProcessTries)
			inProcessTries++
		case ack.Error.ErrorCode == codeBatchIncomplete, ack.Error.ErrorCode == codeBatchTooManyInflight:
			if crowded == batchRetries {
				return 0, nil, fmt.Errorf("batch refused %d times: %w", crowded+1, ack.Error)
			}
			crowded++
			wait = time.Duration(crowded) * 10 * time.Millisecond
		default:
			return 0, ack.Error, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return 0, nil, err
		}
	}
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
	if e.rev != cpRev && cpRev != ^uint64(0) {
		return e.rev, nil
	}
	return 0, s.whyRefused(ctx, runID, 0)
}

// publishBatch sends msgs on one connection, which keeps them in order,
// as one atomic batch whose last message is the commit, and waits for
// the commit's answer: one round trip. The others ask for no reply; were
// the first refused (too many batches in flight), the commit finds no
// batch and says so.
func (s *Store) publishBatch(ctx context.Context, msgs []*nats.Msg) (batchAck, error) {
	id := nuid.Next() // 22 characters; the server takes up to 64
	last := msgs[len(msgs)-1]
	for i, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if m != last {
			if err := s.nc.PublishMsg(m); err != nil {
				return batchAck{}, fmt.Errorf("write %s: %w", strings.TrimPrefix(m.Subject, s.putPrefix), err)
			}
		}
	}
	last.Header.Set(hdrBatchCommit, "1")
	key := strings.TrimPrefix(last.Subject, s.putPrefix)
	rctx, cancel := s.bounded(ctx)
	reply, err := s.nc.RequestMsgWithContext(rctx, last)
	cancel()
	if err != nil {
		return batchAck{}, fmt.Errorf("write %s in a batch of %d: %w", key, len(msgs), err)
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return batchAck{}, fmt.Errorf("write %s in a batch of %d: decode ack %q: %w", key, len(msgs), reply.Data, err)
	}
	if ack.Error == nil && ack.Seq == 0 {
		return batchAck{}, fmt.Errorf("write %s in a batch of %d: ack without a sequence: %q", key, len(msgs), reply.Data)
	}
	return ack, nil
}

// notBatched handles a success answer that is not a batch's: a stream
// leader older than nats-server 2.12 (a cluster in the middle of an
// upgrade) ignores the batch headers and stores the messages as plain
// writes, each with its own check, and the answer is the run's PubAck.
// The store stops sending batches (sendBatch). The run was written; the
// commit stands (as a two-write commit) only if the checkpoint key holds
// this commit's document.
func (s *Store) notBatched(ctx context.Context, cpKey string, cpDoc []byte) error {
	e, err := s.get(ctx, cpKey)
	if err == nil && e.found && string(e.value) == string(cpDoc) {
		return nil
	}
	return fmt.Errorf("the server stored a commit's messages one by one (a stream leader before nats-server 2.12?) and %s does not hold this commit's checkpoint: the run moved without it", cpKey)
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
//
// The same update turns message TTLs on, on any bucket (allowTTL): the
// markers that remove index entries expire with them. Until then they
// stay (see markerMsg).
func (s *Store) enableBatches(ctx context.Context) {
	s.enableOnce.Do(func() {
		if !s.mayEnable && s.ttl.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		info, err := s.stream.Info(ctx)
		if err != nil {
			return
		}
		cfg := info.Config
		atomic := s.mayEnable && !stagesOnDisk(cfg)
		if (atomic && !cfg.AllowAtomicPublish) || !cfg.AllowMsgTTL {
			cfg.AllowAtomicPublish = cfg.AllowAtomicPublish || atomic
			allowTTL(&cfg)
			updated, err := s.js.UpdateStream(ctx, cfg)
			if err != nil {
				return
			}
			cfg = updated.CachedInfo().Config
		}
		s.ttl.Store(cfg.AllowMsgTTL)
		if atomic {
			s.batches.Store(cfg.AllowAtomicPublish)
		}
	})
}

// allowTTL turns message TTLs on as a KV bucket with a limit marker TTL
// has them (nats kv add --marker-ttl): the KV client and the nats CLI
// then keep them through an edit of the bucket, which a stream that
// allows TTLs requires (the server refuses to turn them off).
func allowTTL(cfg *jetstream.StreamConfig) {
	cfg.AllowMsgTTL = true
	if cfg.SubjectDeleteMarkerTTL == 0 {
		cfg.SubjectDeleteMarkerTTL = time.Second
	}
}
