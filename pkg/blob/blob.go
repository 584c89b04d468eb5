package blob

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Ref names a stored blob. A step keeps a Ref in its state instead of the
// bytes: a few hundred bytes of checkpoint for a document of any size.
type Ref struct {
	// Bucket is the store's bucket (the JetStream Object Store name).
	Bucket string `json:"bucket"`
	// Name is the object's name in the bucket (see ObjectName).
	Name string `json:"name"`
	// Digest is "SHA-256=" and the base64url SHA-256 of the bytes, as the
	// JetStream Object Store writes it.
	Digest string `json:"digest"`
	// Size in bytes.
	Size int64 `json:"size"`
}

// IsZero reports whether r is the zero Ref (no blob).
func (r Ref) IsZero() bool { return r == Ref{} }

// Info describes a stored object, as List returns it.
type Info struct {
	Name    string
	Digest  string
	Size    int64
	ModTime time.Time
}

// Store keeps blobs. Implementations: objstore (JetStream Object Store) and
// Memory (tests of workflows). Every implementation passes blobtest.Run.
type Store interface {
	// Put stores data as object name. An object of that name with the
	// same digest already there makes Put a no-op returning its Ref; one
	// with another digest is ErrConflict: a store never overwrites an
	// object, since a committed checkpoint may reference it.
	Put(ctx context.Context, name string, data []byte) (Ref, error)
	// Open reads the blob ref names. ErrNotFound when it is missing,
	// ErrCorrupt when the stored object is not the one ref describes (the
	// reader also fails with ErrCorrupt at the end when the bytes do not
	// hash to ref.Digest).
	Open(ctx context.Context, ref Ref) (io.ReadCloser, error)
	// List returns the objects whose names start with prefix, in no
	// particular order.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes object name; a missing object is no error.
	Delete(ctx context.Context, name string) error
}

// Stater is a Store that reads one object's description by name, without
// listing the bucket. Both stores of this module implement it; a reader
// that knows a name but not its digest (an archived run) needs it.
type Stater interface {
	// Stat describes object name; ErrNotFound when there is none.
	Stat(ctx context.Context, name string) (Info, error)
}

// RefOf is the Ref of the object info describes in bucket.
func RefOf(bucket string, info Info) Ref {
	return Ref{Bucket: bucket, Name: info.Name, Digest: info.Digest, Size: info.Size}
}

var (
	// ErrNotFound: no blob of that name (never stored, or deleted by
	// retention after its run ended).
	ErrNotFound = errors.New("blob not found")
	// ErrConflict: Put found an object of that name with other bytes.
	ErrConflict = errors.New("blob name holds other bytes")
	// ErrCorrupt: the stored bytes are not the ones the Ref describes.
	ErrCorrupt = errors.New("blob does not match its reference")
	// ErrInvalidName: a name outside the characters ValidName allows.
	ErrInvalidName = errors.New("invalid blob name")
)

// Digest is the digest a Ref carries for data: "SHA-256=" and the
// base64url (padded) SHA-256, the JetStream Object Store's format.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return digestOf(sum[:])
}

func digestOf(sum []byte) string { return "SHA-256=" + base64.URLEncoding.EncodeToString(sum) }

// ValidName reports whether name can name a blob within a step: 1-200
// bytes of letters, digits, '-', '_', '.' and '/', where '/' separates
// non-empty segments other than "." and "..". The set is the one NATS KV
// keys allow (minus '='), so names read the same in logs, the CLI and the
// nats CLI.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > 200 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '/') {
			return false
		}
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// ObjectName is the object a step's blob is stored as:
// "<run>/<step>/<name>/<hex SHA-256 of the bytes>". It depends only on the
// logical step and the content, never on the attempt: a retried step that
// stores the same bytes finds them there (no upload), and one that stores
// other bytes under the same name (a new screenshot, a regenerated
// report) gets its own object, so an attempt never overwrites what another
// attempt's committed checkpoint references. The checkpoint that wins is
// the one whose Ref counts; the other attempts' objects are garbage that
// retention deletes with the run.
func ObjectName(run string, step int, name, digest string) (string, error) {
	if !checkpoint.ValidID(run) {
		return "", fmt.Errorf("blob of run %q: invalid run id", run)
	}
	if !ValidName(name) {
		return "", fmt.Errorf("blob %q: %w: use 1-200 letters, digits, '-', '_', '.' and '/' between segments", name, ErrInvalidName)
	}
	sum, err := decodeDigest(digest)
	if err != nil {
		return "", err
	}
	return RunPrefix(run) + strconv.Itoa(step) + "/" + name + "/" + hex.EncodeToString(sum), nil
}

// RunPrefix is the prefix of every object of run's blobs: "<run>/".
func RunPrefix(run string) string { return run + "/" }

// RunOf returns the run id an object name belongs to, or "" when the name
// is not a step blob's.
func RunOf(object string) string {
	run, _, ok := strings.Cut(object, "/")
	if !ok || !checkpoint.ValidID(run) {
		return ""
	}
	return run
}

func decodeDigest(d string) ([]byte, error) {
	b64, ok := strings.CutPrefix(d, "SHA-256=")
	if !ok {
		return nil, fmt.Errorf("blob digest %q: want SHA-256=<base64url>", d)
	}
	sum, err := base64.URLEncoding.DecodeString(b64)
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("blob digest %q: want SHA-256=<base64url of 32 bytes>", d)
	}
	return sum, nil
}

// VerifyingReader wraps r, the bytes of ref: past the end it returns
// ErrCorrupt unless they were ref.Size bytes hashing to ref.Digest.
// Stores use it so a reader never hands out unverified bytes silently.
func VerifyingReader(r io.ReadCloser, ref Ref) io.ReadCloser {
	return &verifying{r: r, ref: ref, h: sha256.New()}
}

type verifying struct {
	r   io.ReadCloser
	ref Ref
	h   interface {
		io.Writer
		Sum([]byte) []byte
	}
	n   int64
	err error
}

func (v *verifying) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.ref.Size {
		v.err = fmt.Errorf("blob %s: more than %d bytes: %w", v.ref.Name, v.ref.Size, ErrCorrupt)
		return n, v.err
	}
	if errors.Is(err, io.EOF) {
		if got := digestOf(v.h.Sum(nil)); v.n != v.ref.Size || got != v.ref.Digest {
			v.err = fmt.Errorf("blob %s: read %d bytes with digest %s, reference says %d bytes %s: %w", v.ref.Name, v.n, got, v.ref.Size, v.ref.Digest, ErrCorrupt)
			return n, v.err
		}
		v.err = io.EOF
	}
	return n, err
}

func (v *verifying) Close() error { return v.r.Close() }
