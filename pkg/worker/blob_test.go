package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// document is the state of the blob workflows: a reference to the
// document, never its bytes.
type document struct {
	Form  blob.Ref `json:"form"`
	Bytes int      `json:"bytes,omitempty"`
	// Inline holds the bytes in the state: what the budget refuses.
	Inline []byte `json:"inline,omitempty"`
}

func fiveMB() []byte {
	b := make([]byte, 5<<20)
	x := uint32(42)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// Acceptance 4 of issue 6, through a real worker on both stores: a step
// that stores a 5 MB document keeps its checkpoint under 2 KB. Its first
// attempt fails after storing the document; the retry stores it again
// without a second upload, and the next step reads it back.
func TestFiveMegabyteDocumentThroughWorker(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			blobs, err := objstore.New(ctx, h.js, objstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			doc := fiveMB()
			var attempts atomic.Int32
			wf := steps.New[document]("docs", 1)
			assess := wf.Ref("assess")
			wf.
				Step("fetch", func(ctx context.Context, s *steps.Context, d document) (steps.Outcome[document], error) {
					ref, err := s.PutBlob(ctx, "claim-form.pdf", doc)
					if err != nil {
						return steps.Outcome[document]{}, err
					}
					if attempts.Add(1) == 1 {
						return steps.Outcome[document]{}, errors.New("lost the connection after storing the document")
					}
					d.Form = ref
					return steps.Next(assess, d), nil
				}, steps.WithRetry(steps.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond})).
				Step("assess", func(ctx context.Context, s *steps.Context, d document) (steps.Outcome[document], error) {
					b, err := s.GetBlob(ctx, d.Form)
					if err != nil {
						return steps.Outcome[document]{}, err
					}
					if !bytes.Equal(b, doc) {
						return steps.Outcome[document]{}, steps.Permanent(errors.New("read back other bytes"))
					}
					d.Bytes = len(b)
					return steps.Complete(d), nil
				})
			_, stop := h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Blobs = blobs })
			defer stop()

			h.start("docs", "doc-1", `{}`)
			h.waitStatus("doc-1", checkpoint.StatusCompleted, 30*time.Second)
			cps := h.checkpoints("doc-1")
			assertContiguous(t, cps, 2)
			for _, cp := range cps {
				enc, err := json.Marshal(cp)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("checkpoint %d %s (attempt %d): %d bytes", cp.Step, cp.Name, cp.Attempt, len(enc))
				if len(enc) >= 2048 {
					t.Errorf("checkpoint %d is %d bytes, want under 2 KB", cp.Step, len(enc))
				}
			}
			if cps[0].Attempt != 2 {
				t.Errorf("fetch committed by attempt %d, want 2", cps[0].Attempt)
			}
			var d document
			if err := json.Unmarshal(cps[1].State, &d); err != nil {
				t.Fatal(err)
			}
			if d.Bytes != len(doc) || d.Form.Size != int64(len(doc)) || d.Form.Digest != blob.Digest(doc) {
				t.Fatalf("final state %+v", d)
			}
			objs, err := blobs.List(ctx, blob.RunPrefix("doc-1"))
			if err != nil || len(objs) != 1 {
				t.Fatalf("the run's blobs: %v %+v (two attempts, same bytes: one object)", err, objs)
			}
		})
	}
}

// The same document kept in the state instead is refused by the budget,
// and the run's error names the remedy.
func TestInlineDocumentNamesPutBlob(t *testing.T) {
	h := newHarness(t, "kv")
	doc := fiveMB()
	wf := steps.New[document]("inline", 1).
		Step("fetch", func(_ context.Context, _ *steps.Context, d document) (steps.Outcome[document], error) {
			d.Inline = doc
			return steps.Complete(d), nil
		})
	_, stop := h.startWorker(steps.NewRegistry().MustRegister(wf), nil)
	defer stop()
	h.start("inline", "inline-1", `{}`)
	run := h.waitStatus("inline-1", checkpoint.StatusDead, 30*time.Second)
	if !strings.Contains(run.Error, "store it with PutBlob and keep the reference in the state") {
		t.Fatalf("run error: %s", run.Error)
	}
}

// A worker without a blob store fails the step with an error that says
// what to configure.
func TestPutBlobWithoutStore(t *testing.T) {
	h := newHarness(t, "kv")
	wf := steps.New[document]("noblobs", 1).
		Step("fetch", func(ctx context.Context, s *steps.Context, d document) (steps.Outcome[document], error) {
			if _, err := s.PutBlob(ctx, "doc", []byte("x")); err != nil {
				return steps.Outcome[document]{}, steps.Permanent(fmt.Errorf("fetch: %w", err))
			}
			return steps.Complete(d), nil
		})
	_, stop := h.startWorker(steps.NewRegistry().MustRegister(wf), nil)
	defer stop()
	h.start("noblobs", "noblobs-1", `{}`)
	run := h.waitStatus("noblobs-1", checkpoint.StatusDead, 30*time.Second)
	if !strings.Contains(run.Error, "worker.Config.Blobs") {
		t.Fatalf("run error: %s", run.Error)
	}
}
