package steps

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/durable-run/durable/pkg/blob"
)

// ErrNoBlobStore: PutBlob or GetBlob in a step context built without a
// blob store.
var ErrNoBlobStore = errors.New("no blob store: give the worker one (worker.Config.Blobs, e.g. objstore.New on the same NATS), or set ContextConfig.BlobStore")

// PutBlob stores a large artefact (a document, a file, a screenshot) and
// returns a reference to keep in the state instead of the bytes, so the
// checkpoint stays small. Call it with the bytes the step holds: they are
// streamed to the store, not copied.
//
// The object is named for the logical step, name and content (see
// blob.ObjectName), never the attempt: a retry of the step that stores the
// same bytes uploads nothing and gets the same Ref, and one that stores
// other bytes (a new screenshot) gets a new Ref without touching the bytes
// an earlier attempt stored. Whichever attempt commits the step, the Ref in
// its state names its own bytes. name is 1-200 letters, digits, '-', '_',
// '.', with '/' between segments; the store's errors come back wrapped
// (blob.ErrConflict, blob.ErrInvalidName).
func (s *Context) PutBlob(ctx context.Context, name string, data []byte) (blob.Ref, error) {
	if s.cfg.BlobStore == nil {
		return blob.Ref{}, fmt.Errorf("put blob %s in %s: %w", name, s.IdempotencyKey(), ErrNoBlobStore)
	}
	object, err := blob.ObjectName(s.cfg.RunID, s.cfg.Step, name, blob.Digest(data))
	if err != nil {
		return blob.Ref{}, fmt.Errorf("put blob in %s: %w", s.IdempotencyKey(), err)
	}
	ref, err := s.cfg.BlobStore.Put(ctx, object, data)
	if err != nil {
		return blob.Ref{}, fmt.Errorf("put blob %s in %s: %w", name, s.IdempotencyKey(), err)
	}
	return ref, nil
}

// GetBlob reads the bytes ref names, verified against its size and digest
// (blob.ErrCorrupt otherwise). blob.ErrNotFound means the blob is gone:
// deleted by retention some time after its run ended. The ref may come from
// any step or run.
func (s *Context) GetBlob(ctx context.Context, ref blob.Ref) ([]byte, error) {
	r, err := s.OpenBlob(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Sized up front, so a 5 MB document is held once, not grown into.
	buf := make([]byte, 0, min(max(ref.Size, 0), 1<<30)+1)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get blob %s: %w", ref.Name, err)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// OpenBlob is GetBlob as a stream, for blobs a step passes on rather than
// holds (to a file, an HTTP upload). The reader fails with blob.ErrCorrupt
// at the end when the bytes do not match ref. Close it.
func (s *Context) OpenBlob(ctx context.Context, ref blob.Ref) (io.ReadCloser, error) {
	if s.cfg.BlobStore == nil {
		return nil, fmt.Errorf("get blob %s in %s: %w", ref.Name, s.IdempotencyKey(), ErrNoBlobStore)
	}
	if ref.IsZero() {
		return nil, fmt.Errorf("get blob in %s: empty reference: %w", s.IdempotencyKey(), blob.ErrNotFound)
	}
	r, err := s.cfg.BlobStore.Open(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("get blob in %s: %w", s.IdempotencyKey(), err)
	}
	return r, nil
}
