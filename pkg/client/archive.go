package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// ArchiveBucket is the JetStream Object Store bucket that the scheduler
// archives runs to before retention purges them (scheduler --archive),
// and that Inspect reads a purged run from.
const ArchiveBucket = "DURABLE_ARCHIVE"

// archiveFormat is the version of the archive document. A reader refuses
// a later one with a clear error rather than showing half of it.
const archiveFormat = 1

// maxArchiveBytes bounds what ReadArchive inflates: a run record is
// bounded (checkpoint.MaxRunRecordBytes) and so are its checkpoints, so a
// document past this is not one of ours.
const maxArchiveBytes = 256 << 20

// gzipWriters are reused: a new one allocates its compressor's 1 MB of
// tables, more than a run's document.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// ArchiveObject is the object run id is archived as: "<id>.json.gz".
func ArchiveObject(id string) string { return id + ".json.gz" }

// Archived says that a RunView was read from the archive: the run was
// purged from the checkpoint store, and this is the view written just
// before.
type Archived struct {
	Bucket string `json:"bucket"`
	Object string `json:"object"`
	// Bytes is the compressed document's size.
	Bytes int64     `json:"bytes"`
	At    time.Time `json:"archived_at"`
	// Purged is the run's tombstone while the store keeps it.
	Purged *checkpoint.Tombstone `json:"purged,omitempty"`
}

// archiveDoc is what an archive object holds, gzipped.
type archiveDoc struct {
	Format     int       `json:"format"`
	ArchivedAt time.Time `json:"archived_at"`
	Run        RunView   `json:"run"`
}

// Archive writes run id as Inspect shows it (record, every checkpoint
// with its journal summary, effects, approvals, the whole audit trail) to
// archive as one gzipped JSON document named ArchiveObject(id). Writing
// it again replaces it: a run id freed after its tombstone expired may be
// archived a second time by its new run.
func (c *Client) Archive(ctx context.Context, archive blob.Store, id string) (Archived, error) {
	if archive == nil {
		return Archived{}, fmt.Errorf("archive run %s: no archive store given", id)
	}
	v, err := c.Inspect(ctx, id)
	if err != nil {
		return Archived{}, err
	}
	if v.Archived != nil {
		return Archived{}, fmt.Errorf("archive run %s: %w: it is purged, only its archive is left", id, ErrNotFound)
	}
	doc := archiveDoc{Format: archiveFormat, ArchivedAt: time.Now().UTC(), Run: v}
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	if err := json.NewEncoder(zw).Encode(doc); err != nil {
		return Archived{}, fmt.Errorf("archive run %s: %w", id, err)
	}
	if err := zw.Close(); err != nil {
		return Archived{}, fmt.Errorf("archive run %s: %w", id, err)
	}
	name := ArchiveObject(id)
	ref, err := archive.Put(ctx, name, buf.Bytes())
	if errors.Is(err, blob.ErrConflict) { // an earlier archive of the run, or of a run that had its id
		if err = archive.Delete(ctx, name); err == nil {
			ref, err = archive.Put(ctx, name, buf.Bytes())
		}
	}
	if err != nil {
		return Archived{}, fmt.Errorf("archive run %s: %w", id, err)
	}
	return Archived{Bucket: ref.Bucket, Object: ref.Name, Bytes: ref.Size, At: doc.ArchivedAt}, nil
}

// ReadArchive reads run id's view from archive, which must be a
// blob.Stater (both stores of pkg/blob are). An error wrapping
// ErrNotFound says it was never archived there.
func ReadArchive(ctx context.Context, archive blob.Store, id string) (RunView, error) {
	st, ok := archive.(blob.Stater)
	if !ok {
		return RunView{}, fmt.Errorf("read the archive of %s: the store cannot look an object up by name (blob.Stater)", id)
	}
	info, err := st.Stat(ctx, ArchiveObject(id))
	if errors.Is(err, blob.ErrNotFound) {
		return RunView{}, fmt.Errorf("run %s is not archived: %w", id, ErrNotFound)
	}
	if err != nil {
		return RunView{}, fmt.Errorf("read the archive of %s: %w", id, err)
	}
	ref := blob.RefOf(bucketOf(archive), info)
	r, err := archive.Open(ctx, ref)
	if err != nil {
		return RunView{}, fmt.Errorf("read the archive of %s: %w", id, err)
	}
	defer r.Close()
	doc, err := decodeArchive(r)
	if err != nil {
		return RunView{}, fmt.Errorf("read the archive of %s (%s): %w", id, ref.Name, err)
	}
	if doc.Run.RunID != id {
		return RunView{}, fmt.Errorf("read the archive of %s: %s holds run %q", id, ref.Name, doc.Run.RunID)
	}
	v := doc.Run
	v.Archived = &Archived{Bucket: ref.Bucket, Object: ref.Name, Bytes: ref.Size, At: doc.ArchivedAt}
	return v, nil
}

func decodeArchive(r io.Reader) (archiveDoc, error) {
	var doc archiveDoc
	zr, err := gzip.NewReader(r)
	if err != nil {
		return doc, err
	}
	body, err := io.ReadAll(io.LimitReader(zr, maxArchiveBytes+1))
	if err != nil {
		return doc, err
	}
	if len(body) > maxArchiveBytes {
		return doc, fmt.Errorf("more than %d bytes inflated", maxArchiveBytes)
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return doc, err
	}
	if doc.Format != archiveFormat {
		return doc, fmt.Errorf("archive format %d, this release reads %d: read it with a newer durable", doc.Format, archiveFormat)
	}
	return doc, nil
}

// bucketOf is the bucket a store's Refs name.
func bucketOf(s blob.Store) string {
	if b, ok := s.(interface{ Bucket() string }); ok {
		return b.Bucket()
	}
	return ""
}

// fromArchive reads the view of run id, which the store does not have
// (notFound says so: a *checkpoint.PurgedError while its tombstone is
// kept), from the archive: the one given with WithArchive, else the
// bucket ArchiveBucket when it exists. It returns notFound itself when
// the run was not archived.
func (c *Client) fromArchive(ctx context.Context, id string, notFound error) (RunView, error) {
	archive := c.archive
	if archive == nil && c.js != nil {
		s, err := objstore.New(ctx, c.js, objstore.Options{Bucket: ArchiveBucket, NoCreate: true})
		if errors.Is(err, blob.ErrNotFound) {
			return RunView{}, notFound
		}
		if err != nil {
			return RunView{}, fmt.Errorf("%w; the archive cannot be read: %w", notFound, err)
		}
		archive = s
	}
	if archive == nil {
		return RunView{}, notFound
	}
	v, err := ReadArchive(ctx, archive, id)
	if errors.Is(err, ErrNotFound) {
		return RunView{}, notFound
	}
	if err != nil {
		return RunView{}, fmt.Errorf("%w; its archive cannot be read: %w", notFound, err)
	}
	if purged := (*checkpoint.PurgedError)(nil); errors.As(notFound, &purged) {
		t := purged.Tombstone
		v.Archived.Purged = &t
	}
	return v, nil
}

// Option configures a Client.
type Option func(*Client)

// WithArchive has Inspect read a run the store no longer has from
// archive (where the scheduler's --archive wrote it) rather than from
// the Object Store bucket ArchiveBucket.
func WithArchive(archive blob.Store) Option {
	return func(c *Client) { c.archive = archive }
}
