package checkpointtest

import (
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// testLiveness: a store that implements checkpoint.Liveness keeps the
// newest mark of each run apart, reads none as zero, and refuses a bad id.
func testLiveness(t *testing.T, s checkpoint.Store) {
	lv, ok := s.(checkpoint.Liveness)
	if !ok {
		t.Skip("the store keeps no liveness marks")
	}
	if at, err := lv.LastAlive(ctx(t), "alive-none"); err != nil || !at.IsZero() {
		t.Fatalf("LastAlive of a run never marked = %v, %v; want zero, nil", at, err)
	}
	first := time.UnixMilli(1_700_000_000_000).UTC()
	for i, at := range []time.Time{first, first.Add(90 * time.Second)} {
		if err := lv.MarkAlive(ctx(t), "alive-1", at); err != nil {
			t.Fatal(err)
		}
		got, err := lv.LastAlive(ctx(t), "alive-1")
		if err != nil || !got.Equal(at) {
			t.Fatalf("after mark %d: LastAlive = %v, %v; want %v", i+1, got, err, at)
		}
	}
	if at, err := lv.LastAlive(ctx(t), "alive-2"); err != nil || !at.IsZero() {
		t.Fatalf("LastAlive of another run = %v, %v; want zero", at, err)
	}
	if err := lv.MarkAlive(ctx(t), "bad id", first); err == nil {
		t.Fatal("MarkAlive accepted a malformed run id")
	}
}
