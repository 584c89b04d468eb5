package blob

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Memory is a Store in process memory, for tests of workflows and
// examples. Its objects are gone with the process.
type Memory struct {
	bucket string
	mu     sync.Mutex
	objs   map[string]memObject
}

type memObject struct {
	data []byte
	info Info
}

var (
	_ Store  = (*Memory)(nil)
	_ Stater = (*Memory)(nil)
)

// NewMemory returns an empty Memory store whose Refs name bucket.
func NewMemory(bucket string) *Memory {
	return &Memory{bucket: bucket, objs: map[string]memObject{}}
}

// Put implements Store. It keeps its own copy of data.
func (m *Memory) Put(ctx context.Context, name string, data []byte) (Ref, error) {
	if err := ctx.Err(); err != nil {
		return Ref{}, err
	}
	if name == "" {
		return Ref{}, fmt.Errorf("put blob: empty name: %w", ErrInvalidName)
	}
	ref := Ref{Bucket: m.bucket, Name: name, Digest: Digest(data), Size: int64(len(data))}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.objs[name]; ok {
		if o.info.Digest != ref.Digest {
			return Ref{}, fmt.Errorf("put blob %s: stored %s, putting %s: %w", name, o.info.Digest, ref.Digest, ErrConflict)
		}
		return ref, nil
	}
	m.objs[name] = memObject{data: bytes.Clone(data), info: Info{Name: name, Digest: ref.Digest, Size: ref.Size, ModTime: time.Now().UTC()}}
	return ref, nil
}

// Open implements Store.
func (m *Memory) Open(ctx context.Context, ref Ref) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ref.Bucket != m.bucket {
		return nil, fmt.Errorf("open blob %s: bucket %q, this store is %q: %w", ref.Name, ref.Bucket, m.bucket, ErrNotFound)
	}
	m.mu.Lock()
	o, ok := m.objs[ref.Name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("open blob %s: %w", ref.Name, ErrNotFound)
	}
	if o.info.Digest != ref.Digest || o.info.Size != ref.Size {
		return nil, fmt.Errorf("open blob %s: stored %d bytes %s, reference says %d bytes %s: %w", ref.Name, o.info.Size, o.info.Digest, ref.Size, ref.Digest, ErrCorrupt)
	}
	return VerifyingReader(io.NopCloser(bytes.NewReader(o.data)), ref), nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Info
	for name, o := range m.objs {
		if strings.HasPrefix(name, prefix) {
			out = append(out, o.info)
		}
	}
	return out, nil
}

// Stat implements Stater.
func (m *Memory) Stat(ctx context.Context, name string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[name]
	if !ok {
		return Info{}, fmt.Errorf("blob %s: %w", name, ErrNotFound)
	}
	return o.info, nil
}

// Bucket is the bucket its Refs name.
func (m *Memory) Bucket() string { return m.bucket }

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, name)
	return nil
}

// SetModTime backdates an object, so tests of retention need not wait.
func (m *Memory) SetModTime(name string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.objs[name]; ok {
		o.info.ModTime = t
		m.objs[name] = o
	}
}
