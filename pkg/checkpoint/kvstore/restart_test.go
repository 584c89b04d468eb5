package kvstore_test

import (
	"testing"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// Checkpoints survive a server restart on the same store directory, and
// commits go on from the stored revision.
func TestSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
	ctx := testCtx(t)
	dir := t.TempDir()
	srv := testenv.StartNATSAt(t, dir, -1)
	nc, js := srv.Connect(t)
	s, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "r1", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	run.Step = 2
	if run, err = s.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, State: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Server.Shutdown()
	srv.Server.WaitForShutdown()

	srv = testenv.StartNATSAt(t, dir, -1)
	_, js = srv.Connect(t)
	s, err = kvstore.New(ctx, js, kvstore.Options{Bucket: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load(ctx, "r1", checkpoint.AtStep(2))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Run.Rev != run.Rev || snap.Run.Step != 2 || snap.Previous == nil || string(snap.Previous.State) != `{"n":1}` {
		t.Fatalf("after restart: run step %d rev %d (want 2, %d), previous %+v", snap.Run.Step, snap.Run.Rev, run.Rev, snap.Previous)
	}
	next := snap.Run
	next.Step = 3
	if _, err := s.Commit(ctx, next, checkpoint.Checkpoint{Step: 2, State: []byte(`{"n":2}`)}); err != nil {
		t.Fatalf("commit after restart: %v", err)
	}
}
