package kvstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// A memory bucket stages atomic batches in memory, as a replicated one
// does: the store turns allow_atomic on and commits go as one batch. These
// tests run the batch path on one server; TestReplicated runs it on three.

func newBatchStore(t testing.TB, js jetstream.JetStream) (*kvstore.Store, string) {
	t.Helper()
	bucket := uniqueBucket()
	s, err := kvstore.New(testCtx(t), js, kvstore.Options{Bucket: bucket, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatalf("kvstore.New: %v", err)
	}
	if !kvstore.Batches(s) {
		t.Fatal("a memory bucket's store commits in two writes, want one atomic batch")
	}
	return s, bucket
}

// Atomic commits keep the strict contract: a refused commit writes
// nothing.
func TestConformanceBatches(t *testing.T) {
	js := connect(t)
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		s, _ := newBatchStore(t, js)
		return s
	})
}

// lastSeq is the bucket's stream's last sequence: it moves with any write.
func lastSeq(t *testing.T, js jetstream.JetStream, bucket string) uint64 {
	t.Helper()
	st, err := js.Stream(testCtx(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.LastSeq
}

// A commit whose run revision is stale stores no checkpoint; one onto an
// existing checkpoint moves no run. Neither writes anything at all.
func TestBatchCommitIsAtomic(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newBatchStore(t, js)
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "atomic-1", Status: checkpoint.StatusRunning, Step: 1, StepName: "one"})
	if err != nil {
		t.Fatal(err)
	}
	audited := run
	audited.Audit = []checkpoint.AuditEntry{{Kind: checkpoint.AuditRefused, Step: 1, By: "mallory"}}
	if audited, err = s.UpdateRun(ctx, audited); err != nil {
		t.Fatal(err)
	}

	before := lastSeq(t, js, bucket)
	next, cp := step1(run, "stale")
	if _, err := s.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("Commit at a stale revision: %v, want ErrConflict", err)
	}
	if _, err := s.Checkpoint(ctx, "atomic-1", 1); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("checkpoint after a commit at a stale revision: %v, want none", err)
	}
	if after := lastSeq(t, js, bucket); after != before {
		t.Fatalf("stream moved from %d to %d on a refused commit", before, after)
	}

	next, cp = step1(audited, "first")
	got, err := s.Commit(ctx, next, cp)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rev != before+2 {
		t.Fatalf("run revision %d after a commit on sequence %d: want the batch's second message", got.Rev, before)
	}

	// The current revision, but the step is committed: no run write.
	before = got.Rev
	again := got
	again.StepName = "should-not-be-stored"
	if _, err := s.Commit(ctx, again, checkpoint.Checkpoint{Step: 1, State: []byte(`{"by":"second"}`)}); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("Commit onto a committed step: %v, want ErrCheckpointExists", err)
	}
	if after := lastSeq(t, js, bucket); after != before {
		t.Fatalf("stream moved from %d to %d on a refused commit", before, after)
	}
	stored, err := s.GetRun(ctx, "atomic-1")
	if err != nil || stored.Rev != got.Rev || stored.StepName != "two" {
		t.Fatalf("run after a refused commit: %+v, %v; want rev %d at step two", stored, err, got.Rev)
	}
	mustCheckpoint(ctx, t, s, "atomic-1", 1, `{"by":"first"}`)
}

// A bucket written by an older version holds what two-write commits
// leave: a run lagging its checkpoint, a checkpoint of an earlier
// generation that no run adopted, a delete marker on a checkpoint key.
// Batch commits read and write over them as the two-write commit does.
// An old process (SetBatches false) and a new one share the bucket, as
// in a fleet in the middle of an upgrade.
func TestBatchCommitOnOlderData(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newBatchStore(t, js)
	old, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	kvstore.SetBatches(old, false)

	// The old process dies between its writes: the new one's commit of
	// the step loses to the checkpoint, and the run is rolled forward.
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "lag-1", Status: checkpoint.StatusRunning, Step: 1, StepName: "one"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, crash := context.WithCancel(ctx)
	kvstore.SetAfterCheckpoint(old, func(context.Context) { crash() })
	next, cp := step1(run, "old")
	if _, err := old.Commit(cctx, next, cp); err == nil {
		t.Fatal("a commit cut between its writes succeeded")
	}
	kvstore.SetAfterCheckpoint(old, nil)
	next, cp = step1(run, "new")
	if _, err := s.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("Commit onto an old process's checkpoint: %v, want ErrCheckpointExists", err)
	}
	rollForward(ctx, t, s, "lag-1", 1)
	mustCheckpoint(ctx, t, s, "lag-1", 1, `{"by":"old"}`)

	// The old process's commit lost to a decision and left its
	// checkpoint of generation 0: the resumed step's batch replaces it.
	run, err = s.CreateRun(ctx, checkpoint.Run{ID: "orphan-1", Status: checkpoint.StatusRunning, Step: 1, StepName: "one"})
	if err != nil {
		t.Fatal(err)
	}
	kvstore.SetAfterCheckpoint(old, func(ctx context.Context) {
		park(ctx, t, s, "orphan-1")
		decide(ctx, t, s, "orphan-1", checkpoint.DecisionApproved)
	})
	next, cp = step1(run, "before")
	if _, err := old.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("old Commit that lost to a decision: %v, want ErrConflict", err)
	}
	kvstore.SetAfterCheckpoint(old, nil)
	resumed, err := s.GetRun(ctx, "orphan-1")
	if err != nil {
		t.Fatal(err)
	}
	next, cp = step1(resumed, "after")
	cp.Gen = resumed.Resumes
	if _, err := s.Commit(ctx, next, cp); err != nil {
		t.Fatalf("Commit of the resumed step over an earlier generation: %v", err)
	}
	mustCheckpoint(ctx, t, s, "orphan-1", 1, `{"by":"after"}`)
	next, cp = step1(run, "zombie")
	if _, err := s.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("Commit of generation 0 over generation 1: %v, want ErrCheckpointExists", err)
	}

	// A delete marker on the checkpoint key.
	commitOverDeleteMarker(ctx, t, js, s, bucket)
}

// A bucket made without allow_atomic (by an older version, or the KV
// client) keeps its config through New: processes that only read need
// no permission to update it. The first commit turns it on for a memory
// (or replicated) bucket and leaves a one-replica file bucket as it is:
// there, the server would stage each batch on disk.
func TestFirstCommitEnablesBatches(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	for _, storage := range []jetstream.StorageType{jetstream.MemoryStorage, jetstream.FileStorage} {
		bucket := uniqueBucket()
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: storage}); err != nil {
			t.Fatal(err)
		}
		s, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		if streamConfig(t, js, bucket).AllowAtomicPublish {
			t.Fatalf("%v bucket: New turned allow_atomic on", storage)
		}
		run, err := s.CreateRun(ctx, checkpoint.Run{ID: "r", Status: checkpoint.StatusRunning, Step: 1})
		if err != nil {
			t.Fatal(err)
		}
		next, cp := step1(run, "a")
		if _, err := s.Commit(ctx, next, cp); err != nil {
			t.Fatalf("%v bucket: Commit: %v", storage, err)
		}
		cfg := streamConfig(t, js, bucket)
		want := storage == jetstream.MemoryStorage
		if kvstore.Batches(s) != want || cfg.AllowAtomicPublish != want {
			t.Fatalf("%v bucket: batches %v, allow_atomic %v; want %v", storage, kvstore.Batches(s), cfg.AllowAtomicPublish, want)
		}
		if !cfg.AllowDirect || cfg.MaxMsgsPerSubject != 1 || cfg.Storage != storage {
			t.Fatalf("%v bucket: the rest of its config changed: %+v", storage, cfg)
		}
		mustCheckpoint(ctx, t, s, "r", 1, `{"by":"a"}`)
	}
}

// A worker without permission to update the bucket's stream commits in
// two writes: its first commit waits out the update's Timeout once.
func TestBatchesNeedStreamUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
	srv := testenv.StartNATSServer(t, testenv.NATSEmbedded(), testenv.NATSServerOptions(func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "worker", Password: "worker", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Allow: []string{"$JS.API.STREAM.INFO.>", "$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>", "$KV.>"}},
			}},
		}
	}))
	connectAs := func(user string) jetstream.JetStream {
		nc, err := nats.Connect(srv.URL, nats.UserInfo(user, user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := testCtx(t)
	admin := connectAs("admin")
	if _, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "denied", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	s, err := kvstore.New(ctx, connectAs("worker"), kvstore.Options{Bucket: "denied", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "r", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	next, cp := step1(run, "a")
	if _, err := s.Commit(ctx, next, cp); err != nil {
		t.Fatalf("Commit without permission to update the stream: %v", err)
	}
	if kvstore.Batches(s) || streamConfig(t, admin, "denied").AllowAtomicPublish {
		t.Fatal("batches on without permission to turn allow_atomic on")
	}
	mustCheckpoint(ctx, t, s, "r", 1, `{"by":"a"}`)
}

func streamConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(testCtx(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// Updating the bucket through the KV client drops allow_atomic; the next
// commit is refused whole (atomic publish is disabled), made in two
// writes instead, and the store stays on two writes. (The update must
// keep the bucket's marker TTL: the server refuses to turn message TTLs
// off, which the index's markers need.)
func TestBatchesTurnedOff(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newBatchStore(t, js)
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "off-1", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.UpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.MemoryStorage, Description: "edited", LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if streamConfig(t, js, bucket).AllowAtomicPublish {
		t.Fatal("a KV update kept allow_atomic; this test needs it dropped")
	}
	next, cp := step1(run, "a")
	got, err := s.Commit(ctx, next, cp)
	if err != nil {
		t.Fatalf("Commit after allow_atomic was turned off: %v", err)
	}
	if kvstore.Batches(s) {
		t.Fatal("the store still sends batches to a stream that refuses them")
	}
	stored, err := s.GetRun(ctx, "off-1")
	if err != nil || stored.Rev != got.Rev || stored.Step != 2 {
		t.Fatalf("run after the commit: %+v, %v", stored, err)
	}
	mustCheckpoint(ctx, t, s, "off-1", 1, `{"by":"a"}`)
}

// TestBatchServerAnswers holds nats-server to the answers commitBatch
// acts on, with raw batches on a memory KV stream: the commit's PubAck
// names the batch and its size and gives the last message's sequence; a
// failed expectation on either message refuses the whole batch with
// "wrong last sequence" (10071) and stores nothing; expected sequence 0
// is refused over a delete marker; a stream without allow_atomic answers
// 10174; a commit without its first message answers 10176.
func TestBatchServerAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
	nc, js := testenv.StartNATS(t).Connect(t)
	ctx := testCtx(t)
	bucket := uniqueBucket()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	prefix := "$KV." + bucket + "."
	runRev, err := kv.Create(ctx, "run.a", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	wantCode := func(what string, ack batchAnswer, code jetstream.ErrorCode) {
		t.Helper()
		if ack.Error == nil || ack.Error.ErrorCode != code {
			t.Fatalf("%s: answer %+v, want error code %d", what, ack, code)
		}
	}
	send := func(msgs ...batchMsg) batchAnswer { return sendBatch(t, nc, prefix, msgs...) }

	wantCode("batch on a stream without allow_atomic", send(batchMsg{"cp.a.1", 0}, batchMsg{"run.a", runRev}), 10174)
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	ack := send(batchMsg{"cp.a.1", 0}, batchMsg{"run.a", runRev})
	if ack.Error != nil || ack.Count != 2 || ack.Batch == "" || ack.Seq != runRev+2 {
		t.Fatalf("commit: answer %+v, want batch of 2 ending at sequence %d", ack, runRev+2)
	}
	runRev = ack.Seq
	wantCode("checkpoint exists", send(batchMsg{"cp.a.1", 0}, batchMsg{"run.a", runRev}), 10071)
	wantCode("run moved", send(batchMsg{"cp.a.2", 0}, batchMsg{"run.a", runRev - 1}), 10071)
	if _, err := kv.Get(ctx, "cp.a.2"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("checkpoint of a refused batch: %v, want none", err)
	}
	if err := kv.Delete(ctx, "cp.a.3"); err != nil {
		t.Fatal(err)
	}
	wantCode("create-only over a delete marker", send(batchMsg{"cp.a.3", 0}, batchMsg{"run.a", runRev}), 10071)
	wantCode("commit without its first message", send(batchMsg{}, batchMsg{"run.a", runRev}), 10176)
	if e, err := kv.Get(ctx, "run.a"); err != nil || e.Revision() != runRev {
		t.Fatalf("run after refused batches: %v, %v; want revision %d", e, err, runRev)
	}
}

// batchMsg is one message of a raw batch: the key and the sequence it
// expects; an empty key is a message left out.
type batchMsg struct {
	key    string
	expect uint64
}

type batchAnswer struct {
	Error *jetstream.APIError `json:"error"`
	Seq   uint64              `json:"seq"`
	Batch string              `json:"batch"`
	Count int                 `json:"count"`
}

// sendBatch publishes msgs as one atomic batch, the last one committing,
// and returns the commit's answer.
func sendBatch(t *testing.T, nc *nats.Conn, prefix string, msgs ...batchMsg) batchAnswer {
	t.Helper()
	id := nuid.Next()
	var reply *nats.Msg
	for i, m := range msgs {
		if m.key == "" {
			continue
		}
		msg := &nats.Msg{Subject: prefix + m.key, Data: []byte(`{}`), Header: nats.Header{
			"Nats-Batch-Id":                       {id},
			"Nats-Batch-Sequence":                 {strconv.Itoa(i + 1)},
			"Nats-Expected-Last-Subject-Sequence": {strconv.FormatUint(m.expect, 10)},
		}}
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
			continue
		}
		msg.Header.Set("Nats-Batch-Commit", "1")
		var err error
		if reply, err = nc.RequestMsg(msg, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var ack batchAnswer
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		t.Fatalf("answer %q: %v", reply.Data, err)
	}
	return ack
}
