package kvstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startCluster starts a three-server JetStream cluster on loopback and
// returns a connection to its first server once JetStream answers.
func startCluster(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server cluster")
	}
	c := testenv.StartNATSCluster(t, 3, testenv.NATSEmbedded())
	nc, err := nats.Connect(c.Nodes[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "a JetStream meta leader", func() bool {
		_, err := js.AccountInfo(testCtx(t))
		return err == nil
	})
	return nc, js
}

// count counts the messages published on subject (a spy next to the
// server's own subscription).
func count(t *testing.T, nc *nats.Conn, subject string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestReplicated runs on one three-server cluster (its start is the slow
// part).
func TestReplicated(t *testing.T) {
	nc, js := startCluster(t)
	t.Run("ReadsFromLeader", func(t *testing.T) { testReadsFromLeader(t, nc, js) })
	t.Run("Conformance", func(t *testing.T) { testConformanceReplicated(t, js) })
	t.Run("Purge", func(t *testing.T) { testPurgeReplicated(t, js) })
	t.Run("WriteRightAfterAck", func(t *testing.T) { testWriteRightAfterAck(t, js) })
}

// A purge on a three-replica bucket, whose reads go to the leader and
// which purges alive and due without reading them, leaves nothing of the
// run but its tombstone either.
func testPurgeReplicated(t *testing.T, js jetstream.JetStream) {
	bucket := uniqueBucket()
	s, err := kvstore.New(testCtx(t), js, kvstore.Options{Bucket: bucket, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	run := fullRun(t, s, "victim")
	ended, err := s.EndedBefore(testCtx(t), time.Now(), 10)
	if err != nil || len(ended) != 1 || ended[0].Rev != run.Rev {
		t.Fatalf("EndedBefore = %v, %v; want the run at rev %d", ended, err, run.Rev)
	}
	if err := s.Purge(testCtx(t), ended[0], time.Hour); err != nil {
		t.Fatal(err)
	}
	onlyKeys(t, js, bucket, "victim", "run.victim", "run.=ix.t.victim")
}

// On a replicated bucket every read of the step path goes to the stream
// leader (STREAM.MSG.GET), never as a direct get, which a lagging
// follower may answer; a one-replica bucket keeps its direct gets.
func testReadsFromLeader(t *testing.T, nc *nats.Conn, js jetstream.JetStream) {
	ctx := testCtx(t)
	for _, replicas := range []int{3, 1} {
		bucket := uniqueBucket()
		s, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket, Replicas: replicas})
		if err != nil {
			t.Fatal(err)
		}
		direct := count(t, nc, "$JS.API.DIRECT.GET.KV_"+bucket+".>")
		leader := count(t, nc, "$JS.API.STREAM.MSG.GET.KV_"+bucket)

		run, err := s.CreateRun(ctx, checkpoint.Run{ID: "r", Status: checkpoint.StatusRunning, Step: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordCall(ctx, "r", checkpoint.AtStep(1), checkpoint.CallRecord{Name: "llm", ArgsSHA256: "h", Result: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordFailure(ctx, "r", checkpoint.AtStep(1), checkpoint.Failure{Attempt: 1, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		snap, err := s.Load(ctx, "r", checkpoint.AtStep(1))
		if err != nil {
			t.Fatal(err)
		}
		if snap.Run.Rev != run.Rev || len(snap.Journal) != 1 || len(snap.Failures) != 1 || snap.Current != nil {
			t.Fatalf("R%d Load(1) = run rev %d (want %d), %d calls, %d failures, current %+v",
				replicas, snap.Run.Rev, run.Rev, len(snap.Journal), len(snap.Failures), snap.Current)
		}
		next, cp := step1(run, "a")
		if _, err := s.Commit(ctx, next, cp); err != nil {
			t.Fatal(err)
		}
		next, cp = step1(run, "b")
		if _, err := s.Commit(ctx, next, cp); err == nil {
			t.Fatalf("R%d: second Commit of step 1 succeeded", replicas)
		}
		snap, err = s.Load(ctx, "r", checkpoint.AtStep(2))
		if err != nil {
			t.Fatal(err)
		}
		if snap.Run.Step != 2 || snap.Previous == nil || string(snap.Previous.State) != `{"by":"a"}` {
			t.Fatalf("R%d Load(2) = run at %d, previous %+v", replicas, snap.Run.Step, snap.Previous)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		d, l := direct.Load(), leader.Load()
		t.Logf("R%d: %d direct gets, %d leader reads", replicas, d, l)
		switch {
		case replicas > 1 && (d != 0 || l == 0):
			t.Fatalf("R%d bucket: %d direct gets, %d leader reads; want leader reads only", replicas, d, l)
		case replicas == 1 && d == 0:
			t.Fatalf("R1 bucket: no direct gets (%d leader reads); want the direct path kept", l)
		}
	}
}

// The whole conformance suite on a three-replica bucket: the leader
// reads must say everything the direct gets say, and commits are atomic
// batches, which keep the strict contract.
func testConformanceReplicated(t *testing.T, js jetstream.JetStream) {
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		s, err := kvstore.New(testCtx(t), js, kvstore.Options{Bucket: uniqueBucket(), Replicas: 3})
		if err != nil {
			t.Fatalf("kvstore.New: %v", err)
		}
		if !kvstore.Batches(s) {
			t.Fatal("a replicated bucket's store commits in two writes, want one atomic batch")
		}
		return s
	})
}

// A write that follows its key's previous write at once, as a commit
// follows CreateRun, succeeds. In a cluster the stream leader acks a
// write before it forgets that the key's write is in process, and for
// that moment answers the next write expecting the key's revision with
// "wrong last sequence" (10164) although the revision is right: the
// store sends it again instead of reporting a conflict that no one won.
func testWriteRightAfterAck(t *testing.T, js jetstream.JetStream) {
	ctx := testCtx(t)
	s, err := kvstore.New(ctx, js, kvstore.Options{Bucket: uniqueBucket(), Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() { errs <- writeRightAfterAck(ctx, s, g) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// writeRightAfterAck creates runs and moves each at once: a cancel or a
// commit of step 1.
func writeRightAfterAck(ctx context.Context, s *kvstore.Store, g int) error {
	for i := range 100 {
		id := fmt.Sprintf("at-once-%d-%d", g, i)
		run, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Status: checkpoint.StatusRunning, Step: 1})
		if err != nil {
			return err
		}
		if i%2 == 0 {
			run.Status = checkpoint.StatusCancelled
			if _, err := s.UpdateRun(ctx, run); err != nil {
				return fmt.Errorf("%s: UpdateRun right after CreateRun: %w", id, err)
			}
			continue
		}
		next, cp := step1(run, "a")
		if _, err := s.Commit(ctx, next, cp); err != nil {
			return fmt.Errorf("%s: Commit right after CreateRun: %w", id, err)
		}
	}
	return nil
}
