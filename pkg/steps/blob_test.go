package steps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

func doc(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestBlobWithoutStore(t *testing.T) {
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1})
	if _, err := s.PutBlob(context.Background(), "doc", []byte("x")); !errors.Is(err, steps.ErrNoBlobStore) {
		t.Fatalf("PutBlob: %v", err)
	}
	_, err := s.GetBlob(context.Background(), blob.Ref{Bucket: "b", Name: "r/1/doc/x"})
	if !errors.Is(err, steps.ErrNoBlobStore) || !strings.Contains(err.Error(), "worker.Config.Blobs") {
		t.Fatalf("GetBlob: %v", err)
	}
}

func TestPutGetBlob(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory("blobs")
	s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: 1, BlobStore: store})
	data := doc(1<<20, 1)
	ref, err := s.PutBlob(ctx, "claim-form.pdf", data)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Bucket != "blobs" || ref.Size != 1<<20 || ref.Digest != blob.Digest(data) ||
		!strings.HasPrefix(ref.Name, "claim-0042/3/claim-form.pdf/") {
		t.Fatalf("ref %+v", ref)
	}
	got, err := s.GetBlob(ctx, ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GetBlob: %v", err)
	}
	if cap(got) > len(data)+1 {
		t.Errorf("GetBlob grew its buffer to %d for %d bytes", cap(got), len(data))
	}
	if _, err := s.PutBlob(ctx, "a b", data); !errors.Is(err, blob.ErrInvalidName) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := s.GetBlob(ctx, blob.Ref{}); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("zero ref: %v", err)
	}
	bad := ref
	bad.Digest = blob.Digest([]byte("other"))
	if _, err := s.GetBlob(ctx, bad); !errors.Is(err, blob.ErrCorrupt) {
		t.Errorf("wrong digest: %v", err)
	}
}

// A retried step names its blob by the logical step and the content: the
// same bytes again are the same blob; other bytes never replace what an
// earlier attempt stored (its checkpoint may have won).
func TestPutBlobRetries(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory("blobs")
	attempt := func(n int) *steps.Context {
		return steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: n, BlobStore: store})
	}
	first, err := attempt(1).PutBlob(ctx, "shot.png", doc(5000, 1))
	if err != nil {
		t.Fatal(err)
	}
	same, err := attempt(2).PutBlob(ctx, "shot.png", doc(5000, 1))
	if err != nil || same != first {
		t.Fatalf("same bytes on a retry: %+v %v, want %+v", same, err, first)
	}
	other, err := attempt(3).PutBlob(ctx, "shot.png", doc(5000, 2))
	if err != nil || other.Name == first.Name {
		t.Fatalf("other bytes on a retry: %+v %v", other, err)
	}
	for _, ref := range []blob.Ref{first, other} {
		if _, err := attempt(4).GetBlob(ctx, ref); err != nil {
			t.Errorf("%s: %v", ref.Name, err)
		}
	}
	// The step number is part of the name: a loop that runs a step again
	// (a new step number) does not collide with the earlier one.
	next := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 4, Attempt: 1, BlobStore: store})
	again, err := next.PutBlob(ctx, "shot.png", doc(5000, 1))
	if err != nil || again.Name == first.Name {
		t.Fatalf("step 4: %+v %v", again, err)
	}
}

// The checkpoint budget's error names the remedy, and the remedy works: a
// state that holds a reference instead of 5 MB is a few hundred bytes.
func TestTooLargeNamesPutBlob(t *testing.T) {
	ctx := context.Background()
	type claim struct {
		Doc []byte   `json:"doc,omitempty"`
		Ref blob.Ref `json:"ref,omitzero"`
	}
	big := doc(5<<20, 3)
	inline, _ := json.Marshal(claim{Doc: big})
	_, err := checkpoint.DefaultBudget.Check("claim-0042", 3, checkpoint.Checkpoint{RunID: "claim-0042", State: inline}.Size())
	var tooLarge *checkpoint.TooLargeError
	if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "store it with PutBlob and keep the reference in the state") {
		t.Fatalf("budget error: %v", err)
	}

	s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, BlobStore: blob.NewMemory("DURABLE_BLOBS")})
	ref, err := s.PutBlob(ctx, "claim-form.pdf", big)
	if err != nil {
		t.Fatal(err)
	}
	state, _ := json.Marshal(claim{Ref: ref})
	cp := checkpoint.Checkpoint{RunID: "claim-0042", Step: 3, Name: "fetch", State: state, Next: "assess", Status: checkpoint.StatusRunning, Attempt: 1}
	if n := cp.Size(); n >= 2048 {
		t.Fatalf("checkpoint with a reference is %d bytes, want under 2 KB", n)
	}
}
