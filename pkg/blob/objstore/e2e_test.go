package objstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/blobtest"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/steps"
)

// claim is the state of the document workflow: a reference, never the bytes.
type claim struct {
	Form  blob.Ref `json:"form"`
	Pages int      `json:"pages"`
}

// docWorkflow stores a 5 MB document in step 1 and reads it back in step 2.
func docWorkflow(doc []byte) *steps.Workflow[claim] {
	w := steps.New[claim]("docs", 1)
	assess := w.Ref("assess")
	return w.
		Step("fetch", func(ctx context.Context, s *steps.Context, c claim) (steps.Outcome[claim], error) {
			ref, err := s.PutBlob(ctx, "claim-form.pdf", doc)
			if err != nil {
				return steps.Outcome[claim]{}, err
			}
			c.Form = ref
			return steps.Next(assess, c), nil
		}).
		Step("assess", func(ctx context.Context, s *steps.Context, c claim) (steps.Outcome[claim], error) {
			b, err := s.GetBlob(ctx, c.Form)
			if err != nil {
				return steps.Outcome[claim]{}, err
			}
			if !bytes.Equal(b, doc) {
				return steps.Outcome[claim]{}, steps.Permanent(errors.New("read back other bytes"))
			}
			c.Pages = len(b) / 4096
			return steps.Complete(c), nil
		})
}

// runToEnd runs wf as a worker would, committing each step's checkpoint to
// store, and returns the checkpoints as stored.
func runToEnd(t *testing.T, ctx context.Context, store checkpoint.Store, blobs blob.Store, wf *steps.Workflow[claim], id string) []checkpoint.Checkpoint {
	t.Helper()
	run, err := store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: wf.Name(), Version: wf.Version(),
		Status: checkpoint.StatusRunning, Step: 1, StepName: wf.FirstStep(), Input: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	state := run.Input
	for n := 1; ; n++ {
		sctx := steps.NewContext(steps.ContextConfig{RunID: id, Workflow: wf.Name(), Version: wf.Version(),
			Step: n, StepName: run.StepName, Attempt: 1, BlobStore: blobs})
		res, err := wf.Execute(ctx, sctx, run.StepName, state, n == 1)
		if err != nil {
			t.Fatalf("step %d %s: %v", n, run.StepName, err)
		}
		cp := checkpoint.Checkpoint{RunID: id, Step: n, Name: run.StepName, State: res.State, Attempt: 1, At: time.Now().UTC()}
		next := run
		next.UpdatedAt, next.Steps = cp.At, run.Steps+1
		switch res.Kind {
		case steps.KindNext:
			cp.Next, cp.Status = res.Next, checkpoint.StatusRunning
			next.Step, next.StepName = n+1, res.Next
		case steps.KindComplete:
			cp.Status, next.Status = checkpoint.StatusCompleted, checkpoint.StatusCompleted
		default:
			t.Fatalf("step %d: outcome %s", n, res.Kind)
		}
		if _, err := checkpoint.DefaultBudget.Check(id, n, cp.Size()); err != nil {
			t.Fatal(err)
		}
		if run, err = store.Commit(ctx, next, cp); err != nil {
			t.Fatalf("commit step %d: %v", n, err)
		}
		if res.Kind == steps.KindComplete {
			cps, err := store.Checkpoints(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return cps
		}
		state = res.State
	}
}

// Acceptance 4 of issue 6: a step that stores a 5 MB document keeps its
// checkpoint under 2 KB. Real NATS: the blob in the Object Store, the
// checkpoints in the JetStream KV store.
func TestFiveMegabyteDocumentKeepsCheckpointSmall(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	store, err := kvstore.New(ctx, js, kvstore.Options{Bucket: uniqueBucket()})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := objstore.New(ctx, js, objstore.Options{Bucket: uniqueBucket()})
	if err != nil {
		t.Fatal(err)
	}
	doc := blobtest.Data(5<<20, 42)

	cps := runToEnd(t, ctx, store, blobs, docWorkflow(doc), "claim-0042")
	if len(cps) != 2 {
		t.Fatalf("%d checkpoints", len(cps))
	}
	for _, cp := range cps {
		enc, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("checkpoint %d %s: %d bytes", cp.Step, cp.Name, len(enc))
		if len(enc) >= 2048 {
			t.Errorf("checkpoint %d is %d bytes, want under 2 KB", cp.Step, len(enc))
		}
	}
	var c claim
	if err := json.Unmarshal(cps[0].State, &c); err != nil {
		t.Fatal(err)
	}
	if c.Form.Size != 5<<20 || c.Form.Digest != blob.Digest(doc) || c.Form.Bucket != blobs.Bucket() {
		t.Fatalf("ref in the state: %+v", c.Form)
	}
	if got, err := blobtest.ReadAll(t, ctx, blobs, c.Form); err != nil || !bytes.Equal(got, doc) {
		t.Fatalf("the stored blob: %v", err)
	}

	// Without the blob store the same 5 MB in the state is refused, and
	// the refusal says what to do.
	type inline struct {
		Form []byte `json:"form"`
	}
	st, _ := json.Marshal(inline{Form: doc})
	_, err = checkpoint.DefaultBudget.Check("claim-0042", 1, checkpoint.Checkpoint{RunID: "claim-0042", State: st}.Size())
	var tooLarge *checkpoint.TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("inline 5 MB: %v", err)
	}
	t.Log(err)
}

// A retry of the step that stores the same document again uploads nothing:
// the object, its reference and the bucket's size stay as they were.
func TestRetriedPutIsIdempotent(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	bucket := uniqueBucket()
	blobs, err := objstore.New(ctx, js, objstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	doc := blobtest.Data(1<<20, 7)
	put := func(attempt int) blob.Ref {
		s := steps.NewContext(steps.ContextConfig{RunID: "claim-0043", Step: 2, Attempt: attempt, BlobStore: blobs})
		ref, err := s.PutBlob(ctx, "scan.png", doc)
		if err != nil {
			t.Fatal(err)
		}
		return ref
	}
	first := put(1)
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again := put(2); again != first {
		t.Fatalf("retry: %+v, first %+v", again, first)
	}
	after, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.LastSeq != before.State.LastSeq {
		t.Fatalf("the retry wrote %d messages", after.State.LastSeq-before.State.LastSeq)
	}
}

// Retention with the real stores: a completed run's blobs go once the
// window has passed, a running run's stay.
func TestRetentionWithRealStores(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	store, err := kvstore.New(ctx, js, kvstore.Options{Bucket: uniqueBucket()})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := objstore.New(ctx, js, objstore.Options{Bucket: uniqueBucket()})
	if err != nil {
		t.Fatal(err)
	}
	doc := blobtest.Data(300<<10, 9)
	runToEnd(t, ctx, store, blobs, docWorkflow(doc), "done-1")

	// A run still at its second step, with its document stored.
	if _, err := store.CreateRun(ctx, checkpoint.Run{ID: "live-1", Workflow: "docs", Version: 1, Status: checkpoint.StatusRunning, Step: 2, StepName: "assess"}); err != nil {
		t.Fatal(err)
	}
	live := steps.NewContext(steps.ContextConfig{RunID: "live-1", Step: 1, BlobStore: blobs})
	liveRef, err := live.PutBlob(ctx, "claim-form.pdf", doc)
	if err != nil {
		t.Fatal(err)
	}

	keep := time.Hour
	sweep := func(at time.Time) blob.SweepResult {
		t.Helper()
		res, err := blob.Retention{Blobs: blobs, Runs: store, After: keep, Now: func() time.Time { return at }}.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := sweep(time.Now()); res.Objects != 0 || res.Kept != 2 {
		t.Fatalf("inside the window: %+v", res)
	}
	if res := sweep(time.Now().Add(keep + time.Minute)); res.Runs != 1 || res.Objects != 1 || res.Bytes != int64(len(doc)) || res.Kept != 1 {
		t.Fatalf("past the window: %+v", res)
	}
	if left, err := blobs.List(ctx, blob.RunPrefix("done-1")); err != nil || len(left) != 0 {
		t.Fatalf("done-1 keeps %v %v", left, err)
	}
	if _, err := blobtest.ReadAll(t, ctx, blobs, liveRef); err != nil {
		t.Fatalf("the live run's blob: %v", err)
	}
	// A step of a swept run that reads its blob learns why it is gone.
	cps, err := store.Checkpoints(ctx, "done-1")
	if err != nil {
		t.Fatal(err)
	}
	var c claim
	_ = json.Unmarshal(cps[0].State, &c)
	s := steps.NewContext(steps.ContextConfig{RunID: "done-1", Step: 3, BlobStore: blobs})
	if _, err := s.GetBlob(ctx, c.Form); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("read after retention: %v", err)
	}
}
