package kvstore_test

import (
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// Workflows caches the list, but a registration made through another
// store (another process) shows at once.
func TestWorkflowsSeesOtherRegistrations(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	reader, bucket := newStore(t, js)
	writer, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	list := func() []checkpoint.WorkflowInfo {
		t.Helper()
		infos, err := reader.Workflows(ctx)
		if err != nil {
			t.Fatalf("Workflows: %v", err)
		}
		return infos
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("Workflows of an empty bucket = %+v", got)
	}
	for v := 1; v <= 3; v++ {
		if err := writer.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "claim", Version: v, FirstStep: "intake"}); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second read comes from the cache
			got := list()
			if len(got) != v || got[v-1].Version != v {
				t.Fatalf("after registering version %d: %+v", v, got)
			}
		}
	}
	// Callers own the slice they get.
	got := list()
	got[0].Name = "changed"
	if again := list(); again[0].Name != "claim" {
		t.Fatalf("a caller's change leaked into the cache: %+v", again)
	}
	// A re-registration of the same version (a worker restart) updates it.
	if err := writer.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "claim", Version: 3, FirstStep: "triage"}); err != nil {
		t.Fatal(err)
	}
	if got := list(); got[2].FirstStep != "triage" {
		t.Fatalf("after re-registering version 3: %+v", got)
	}
}
