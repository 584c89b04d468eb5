// Package objstore is a blob.Store on a JetStream Object Store bucket.
//
//	blobs, err := objstore.New(ctx, js, objstore.Options{Replicas: 3})
//	if err != nil {
//		return err
//	}
//	// hand blobs to the worker (worker.Config.Blobs) and the scheduler's
//	// retention (blob.Retention{Blobs: blobs, ...})
//
// The Object Store chunks an object (128 KiB chunks) and records its
// SHA-256, which is the digest a blob.Ref carries. A delete also purges the
// object's metadata, so the bucket does not keep a marker per deleted blob.
package objstore

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the bucket New uses when Options.Bucket is empty.
const DefaultBucket = "DURABLE_BLOBS"

// Options configures a Store.
type Options struct {
	// Bucket is the Object Store bucket. Default DURABLE_BLOBS.
	Bucket string
	// Replicas of the bucket when New creates it. Default 1; use 3 on a
	// JetStream cluster. An existing bucket keeps its own setting.
	Replicas int
	// Storage of the bucket when New creates it. Default file storage.
	Storage jetstream.StorageType
	// MaxBytes bounds the bucket when New creates it. Default unlimited.
	MaxBytes int64
	// TTL, when New creates the bucket, is how long an object is kept
	// (the stream's MaxAge). Default 0: for ever.
	TTL time.Duration
	// Description of the bucket when New creates it.
	Description string
	// NoCreate: New binds an existing bucket only, and fails with an
	// error wrapping blob.ErrNotFound when there is none (a reader that
	// must not create what a writer configures).
	NoCreate bool
}

// Store is a blob.Store on a JetStream Object Store bucket.
type Store struct {
	obs    jetstream.ObjectStore
	stream jetstream.Stream
	bucket string
}

var (
	_ blob.Store  = (*Store)(nil)
	_ blob.Stater = (*Store)(nil)
)

// New binds the bucket, creating it when missing. It is safe to call from
// many processes at once. An existing bucket keeps its configuration.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Description == "" {
		opts.Description = "durable run blobs: documents, files, screenshots"
	}
	obs, err := js.ObjectStore(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && opts.NoCreate {
		return nil, fmt.Errorf("blob bucket %s: %w", opts.Bucket, blob.ErrNotFound)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      opts.Bucket,
			Description: opts.Description,
			Replicas:    opts.Replicas,
			Storage:     opts.Storage,
			MaxBytes:    opts.MaxBytes,
			TTL:         opts.TTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another process was first
			obs, err = js.ObjectStore(ctx, opts.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("blob bucket %s: %w", opts.Bucket, err)
	}
	st, err := js.Stream(ctx, "OBJ_"+opts.Bucket)
	if err != nil {
		return nil, fmt.Errorf("blob bucket %s: %w", opts.Bucket, err)
	}
	return &Store{obs: obs, stream: st, bucket: opts.Bucket}, nil
}

// Bucket is the bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// Put implements blob.Store. Two concurrent Puts of one name and the same
// bytes both upload, and the later one's copy stays: the bytes are the same.
func (s *Store) Put(ctx context.Context, name string, data []byte) (blob.Ref, error) {
	if name == "" {
		return blob.Ref{}, fmt.Errorf("put blob: empty name: %w", blob.ErrInvalidName)
	}
	ref := blob.Ref{Bucket: s.bucket, Name: name, Digest: blob.Digest(data), Size: int64(len(data))}
	info, err := s.obs.GetInfo(ctx, name)
	switch {
	case err == nil:
		if info.Digest != ref.Digest || int64(info.Size) != ref.Size {
			return blob.Ref{}, fmt.Errorf("put blob %s: stored %s, putting %s: %w", name, info.Digest, ref.Digest, blob.ErrConflict)
		}
		return ref, nil // already stored: a retried step
	case !errors.Is(err, jetstream.ErrObjectNotFound):
		return blob.Ref{}, fmt.Errorf("put blob %s: %w", name, err)
	}
	info, err = s.obs.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data))
	if err != nil {
		return blob.Ref{}, fmt.Errorf("put blob %s: %w", name, err)
	}
	if info.Digest != ref.Digest {
		return blob.Ref{}, fmt.Errorf("put blob %s: stored digest %s, want %s: %w", name, info.Digest, ref.Digest, blob.ErrCorrupt)
	}
	return ref, nil
}

// Open implements blob.Store. Close the reader to release its consumer.
func (s *Store) Open(ctx context.Context, ref blob.Ref) (io.ReadCloser, error) {
	if ref.Bucket != s.bucket {
		return nil, fmt.Errorf("open blob %s: bucket %q, this store is %q: %w", ref.Name, ref.Bucket, s.bucket, blob.ErrNotFound)
	}
	// Check before Get starts a consumer on the chunks.
	info, err := s.obs.GetInfo(ctx, ref.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("open blob %s: %w", ref.Name, blob.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", ref.Name, err)
	}
	if info.Digest != ref.Digest || int64(info.Size) != ref.Size {
		return nil, fmt.Errorf("open blob %s: stored %d bytes %s, reference says %d bytes %s: %w", ref.Name, info.Size, info.Digest, ref.Size, ref.Digest, blob.ErrCorrupt)
	}
	res, err := s.obs.Get(ctx, ref.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("open blob %s: %w", ref.Name, blob.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", ref.Name, err)
	}
	return blob.VerifyingReader(result{res}, ref), nil
}

// result maps the Object Store's digest error to blob.ErrCorrupt.
type result struct{ jetstream.ObjectResult }

func (r result) Read(p []byte) (int, error) {
	n, err := r.ObjectResult.Read(p)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		err = fmt.Errorf("%w: %w", blob.ErrCorrupt, err)
	}
	return n, err
}

// List implements blob.Store. It reads the metadata of every object in the
// bucket (the Object Store has no index by prefix).
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	objs, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", err)
	}
	var out []blob.Info
	for _, o := range objs {
		if o.Deleted || !strings.HasPrefix(o.Name, prefix) {
			continue
		}
		out = append(out, blob.Info{Name: o.Name, Digest: o.Digest, Size: int64(o.Size), ModTime: o.ModTime})
	}
	return out, nil
}

// Stat implements blob.Stater: one read of the object's metadata.
func (s *Store) Stat(ctx context.Context, name string) (blob.Info, error) {
	info, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return blob.Info{}, fmt.Errorf("blob %s: %w", name, blob.ErrNotFound)
	}
	if err != nil {
		return blob.Info{}, fmt.Errorf("blob %s: %w", name, err)
	}
	return blob.Info{Name: info.Name, Digest: info.Digest, Size: int64(info.Size), ModTime: info.ModTime}, nil
}

// Delete implements blob.Store: it deletes the object (purging its
// chunks), then purges its metadata, delete marker included.
func (s *Store) Delete(ctx context.Context, name string) error {
	err := s.obs.Delete(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", name, err)
	}
	meta := "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(meta)); err != nil {
		return fmt.Errorf("delete blob %s: purge metadata: %w", name, err)
	}
	return nil
}
