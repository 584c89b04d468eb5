// Package blobtest is the conformance suite every blob.Store passes.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/blob"
)

// Run runs the suite. newStore returns an empty store, isolated from the
// other tests' (its own bucket).
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	t.Run("PutOpen", func(t *testing.T) { testPutOpen(t, newStore(t)) })
	t.Run("PutSameBytesIsNoop", func(t *testing.T) { testPutSame(t, newStore(t)) })
	t.Run("PutOtherBytesConflicts", func(t *testing.T) { testPutOther(t, newStore(t)) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testConcurrentPuts(t, newStore(t)) })
	t.Run("OpenChecksTheRef", func(t *testing.T) { testOpenChecks(t, newStore(t)) })
	t.Run("EmptyBlob", func(t *testing.T) { testEmpty(t, newStore(t)) })
	t.Run("ListDelete", func(t *testing.T) { testListDelete(t, newStore(t)) })
	t.Run("Stat", func(t *testing.T) { testStat(t, newStore(t)) })
}

// testStat: a Stater describes an object by name, as Put's Ref does, so
// that the object can be opened without a listing; a missing one is
// ErrNotFound.
func testStat(t *testing.T, s blob.Store) {
	st, ok := s.(blob.Stater)
	if !ok {
		t.Skip("the store is not a blob.Stater")
	}
	ctx := ctxFor(t)
	data := Data(1000, 7)
	ref, err := s.Put(ctx, "r1/archive.json.gz", data)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Stat(ctx, ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := blob.RefOf(ref.Bucket, info); got != ref {
		t.Fatalf("Stat gives the ref %+v, Put gave %+v", got, ref)
	}
	if info.ModTime.IsZero() {
		t.Error("Stat gives no modification time")
	}
	got, err := ReadAll(t, ctx, s, blob.RefOf(ref.Bucket, info))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("open by Stat's ref: %d bytes, %v", len(got), err)
	}
	if _, err := st.Stat(ctx, "r1/missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Stat of a missing object: %v, want ErrNotFound", err)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Data returns n deterministic bytes that differ from chunk to chunk.
func Data(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// ReadAll opens ref and reads it to the end.
func ReadAll(t testing.TB, ctx context.Context, s blob.Store, ref blob.Ref) ([]byte, error) {
	t.Helper()
	r, err := s.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func testPutOpen(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	data := Data(300<<10+17, 1) // more than two Object Store chunks
	ref, err := s.Put(ctx, "r1/1/doc.pdf/x", data)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Name != "r1/1/doc.pdf/x" || ref.Size != int64(len(data)) || ref.Digest != blob.Digest(data) || ref.Bucket == "" {
		t.Fatalf("ref %+v", ref)
	}
	got, err := ReadAll(t, ctx, s, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes back, not the %d put", len(got), len(data))
	}
}

func testPutSame(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	data := Data(1000, 2)
	a, err := s.Put(ctx, "r1/1/a", data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Put(ctx, "r1/1/a", bytes.Clone(data))
	if err != nil {
		t.Fatalf("second put of the same bytes: %v", err)
	}
	if a != b {
		t.Fatalf("refs differ: %+v, %+v", a, b)
	}
	infos, err := s.List(ctx, "r1/")
	if err != nil || len(infos) != 1 {
		t.Fatalf("list: %v %+v", err, infos)
	}
}

func testPutOther(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	first := Data(1000, 3)
	ref, err := s.Put(ctx, "r1/1/a", first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "r1/1/a", Data(1000, 4)); !errors.Is(err, blob.ErrConflict) {
		t.Fatalf("other bytes under a stored name: %v, want ErrConflict", err)
	}
	got, err := ReadAll(t, ctx, s, ref)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("the first bytes must stay: %v", err)
	}
}

func testConcurrentPuts(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	data := Data(200<<10, 5)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Put(ctx, "r1/1/same", data)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent put of the same bytes: %v", err)
		}
	}
	got, err := ReadAll(t, ctx, s, blob.Ref{Bucket: bucketOf(t, ctx, s), Name: "r1/1/same", Digest: blob.Digest(data), Size: int64(len(data))})
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after concurrent puts: %v", err)
	}
}

func bucketOf(t *testing.T, ctx context.Context, s blob.Store) string {
	ref, err := s.Put(ctx, "probe/1/bucket", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	return ref.Bucket
}

func testOpenChecks(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	data := Data(5000, 6)
	ref, err := s.Put(ctx, "r1/2/doc", data)
	if err != nil {
		t.Fatal(err)
	}
	missing := ref
	missing.Name = "r1/2/nothing"
	if _, err := s.Open(ctx, missing); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("missing object: %v, want ErrNotFound", err)
	}
	other := ref
	other.Bucket = "another-bucket"
	if _, err := s.Open(ctx, other); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("ref of another bucket: %v, want ErrNotFound", err)
	}
	wrong := ref
	wrong.Digest = blob.Digest([]byte("something else"))
	if _, err := ReadAll(t, ctx, s, wrong); !errors.Is(err, blob.ErrCorrupt) {
		t.Errorf("ref with another digest: %v, want ErrCorrupt", err)
	}
	short := ref
	short.Size--
	if _, err := ReadAll(t, ctx, s, short); !errors.Is(err, blob.ErrCorrupt) {
		t.Errorf("ref with another size: %v, want ErrCorrupt", err)
	}
}

func testEmpty(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	ref, err := s.Put(ctx, "r1/1/empty", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll(t, ctx, s, ref)
	if err != nil || len(got) != 0 || ref.Size != 0 {
		t.Fatalf("empty blob: %v, %d bytes, ref %+v", err, len(got), ref)
	}
}

func testListDelete(t *testing.T, s blob.Store) {
	ctx := ctxFor(t)
	if infos, err := s.List(ctx, ""); err != nil || len(infos) != 0 {
		t.Fatalf("empty store lists %v %+v", err, infos)
	}
	for _, name := range []string{"r1/1/a", "r1/2/b", "r10/1/a", "r2/1/c"} {
		if _, err := s.Put(ctx, name, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := s.List(ctx, blob.RunPrefix("r1"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
		if in.Size != int64(len(in.Name)) || in.Digest != blob.Digest([]byte(in.Name)) || in.ModTime.IsZero() {
			t.Errorf("info %+v", in)
		}
	}
	if len(names) != 2 || !(contains(names, "r1/1/a") && contains(names, "r1/2/b")) {
		t.Fatalf("list r1/: %v", names)
	}
	if err := s.Delete(ctx, "r1/1/a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "r1/1/a"); err != nil {
		t.Fatalf("deleting a deleted blob: %v", err)
	}
	if err := s.Delete(ctx, "never/1/there"); err != nil {
		t.Fatalf("deleting a missing blob: %v", err)
	}
	if _, err := s.Open(ctx, blob.Ref{Bucket: bucketOf(t, ctx, s), Name: "r1/1/a", Digest: blob.Digest([]byte("r1/1/a")), Size: 6}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("open deleted: %v", err)
	}
	infos, err = s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.Name == "r1/1/a" {
			t.Fatal("deleted blob still listed")
		}
	}
	// A name deleted can be stored again (a run id reused after retention).
	if _, err := s.Put(ctx, "r1/1/a", []byte("again")); err != nil {
		t.Fatalf("put after delete: %v", err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if strings.EqualFold(x, y) {
			return true
		}
	}
	return false
}
