// Package tokens is the approver's token file: bearer tokens stored only as
// SHA-256 digests, each with the identity and groups it stands for.
//
//	tok, err := tokens.Create("tokens.json", "ana", []string{"adjusters"})
//	set, err := tokens.Load("tokens.json")
//	who, ok := set.Lookup(tok) // who.ID == "ana", who.Groups == [adjusters]
//
// The token itself is shown once, by Create; the file never holds it.
package tokens

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Prefix starts every token, so that a leaked one is recognisable in logs,
// chat and secret scanners.
const Prefix = "dur_"

var (
	// ErrDuplicateID: the file already has a token for that identity.
	ErrDuplicateID = errors.New("identity already has a token")
	// ErrInvalid: an id, group or file entry is not acceptable.
	ErrInvalid = errors.New("invalid token entry")
)

// An identity is what decisions are recorded under. ':' is kept out because
// events are recorded as "<system>:<who>", and no token may pass for one.
var (
	idRE    = regexp.MustCompile(`^[A-Za-z0-9._@+-]{1,128}$`)
	groupRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	hexRE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Identity is who a token stands for.
type Identity struct {
	ID     string   `json:"id"`
	Groups []string `json:"groups"`
}

// Entry is one token as the file stores it.
type Entry struct {
	ID     string   `json:"id"`
	Groups []string `json:"groups"`
	// SHA256 is the hex SHA-256 of the token.
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
}

type file struct {
	Tokens []Entry `json:"tokens"`
}

// Set is a loaded token file, safe for concurrent use. Watch keeps it in
// step with its file.
type Set struct {
	entries atomic.Pointer[[]entry]
	file    os.FileInfo // the version of the file loaded; nil if missing
}

type entry struct {
	id     Identity
	digest [sha256.Size]byte
}

// Create generates a token for id with groups, adds its digest to the file
// at path (created 0600 when missing) and returns the token. The file is
// replaced atomically. Concurrent Creates on one file are not serialised:
// run them one at a time.
func Create(path, id string, groups []string) (string, error) {
	id = strings.TrimSpace(id)
	if err := validID(id); err != nil {
		return "", err
	}
	groups, err := cleanGroups(groups)
	if err != nil {
		return "", err
	}
	f, err := readValid(path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = &file{}, nil
	}
	if err != nil {
		return "", err
	}
	for _, e := range f.Tokens {
		if e.ID == id {
			return "", fmt.Errorf("%s: %q: %w (created %s); pick another id or remove its entry from the file first",
				path, id, ErrDuplicateID, e.CreatedAt.Format(time.RFC3339))
		}
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	tok := Prefix + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(tok))
	f.Tokens = append(f.Tokens, Entry{ID: id, Groups: groups, SHA256: hex.EncodeToString(sum[:]), CreatedAt: time.Now().UTC().Truncate(time.Second)})
	if err := write(path, f); err != nil {
		return "", err
	}
	return tok, nil
}

// ErrUnknownID: the file has no token for that identity.
var ErrUnknownID = errors.New("no token for that identity")

// Revoke removes the token of id from the file at path (replaced
// atomically). An approver watching the file refuses it within
// WatchInterval.
func Revoke(path, id string) error {
	id = strings.TrimSpace(id)
	if err := validID(id); err != nil {
		return err
	}
	f, err := readValid(path)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(f.Tokens, func(e Entry) bool { return e.ID == id })
	if i < 0 {
		return fmt.Errorf("%s: %q: %w", path, id, ErrUnknownID)
	}
	f.Tokens = slices.Delete(f.Tokens, i, i+1)
	return write(path, f)
}

// Entries are the file's tokens (identities, groups, digests and
// creation times: never a token).
func Entries(path string) ([]Entry, error) {
	f, err := read(path)
	if err != nil {
		return nil, err
	}
	return f.Tokens, nil
}

// readValid reads the file at path and refuses it as Load would: a file
// the approver cannot load is not rewritten (a revoke written into it
// would not take effect).
func readValid(path string) (*file, error) {
	f, err := read(path)
	if err != nil {
		return nil, err
	}
	if _, err := parse(path, f); err != nil {
		return nil, err
	}
	return f, nil
}

// Load reads and validates the token file at path.
func Load(path string) (*Set, error) {
	s, _, err := load(path)
	return s, err
}

// load is Load, with the file as read.
func load(path string) (*Set, *file, error) {
	fi, _ := os.Stat(path) // before the read: Watch starts from this version
	f, err := read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("token file %s does not exist: create it with `durable token create --file %s --id WHO --groups GROUP`", path, path)
	}
	if err != nil {
		return nil, nil, err
	}
	entries, err := parse(path, f)
	if err != nil {
		return nil, nil, err
	}
	s := &Set{file: fi}
	s.entries.Store(&entries)
	return s, f, nil
}

// parse validates f, the token file at path, and returns its entries.
func parse(path string, f *file) ([]entry, error) {
	var entries []entry
	ids := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	for i, e := range f.Tokens {
		where := fmt.Sprintf("token file %s, entry %d", path, i+1)
		if err := validID(e.ID); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if ids[e.ID] {
			return nil, fmt.Errorf("%s: %q: %w; keep one entry per identity", where, e.ID, ErrDuplicateID)
		}
		ids[e.ID] = true
		groups, err := cleanGroups(e.Groups)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, e.ID, err)
		}
		if !hexRE.MatchString(e.SHA256) {
			return nil, fmt.Errorf("%s (%s): %w: sha256 must be 64 lowercase hex digits (the file stores digests, never tokens)", where, e.ID, ErrInvalid)
		}
		var d [sha256.Size]byte
		_, _ = hex.Decode(d[:], []byte(e.SHA256))
		// One token standing for two identities would be decided under
		// whichever entry Lookup met last.
		if other, dup := digests[d]; dup {
			return nil, fmt.Errorf("%s (%s): %w: same sha256 as %s: a token stands for one identity, create a new one with `durable token create`", where, e.ID, ErrInvalid, other)
		}
		digests[d] = e.ID
		entries = append(entries, entry{id: Identity{ID: e.ID, Groups: groups}, digest: d})
	}
	return entries, nil
}

// Lookup returns the identity token stands for. It compares digests in
// constant time and looks at every entry, so timing tells nothing about
// which entry (if any) matched.
func (s *Set) Lookup(token string) (Identity, bool) {
	if s == nil || token == "" {
		return Identity{}, false
	}
	sum := sha256.Sum256([]byte(token))
	entries := s.list()
	found := -1
	for i := range entries {
		if subtle.ConstantTimeCompare(sum[:], entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Identity{}, false
	}
	id := entries[found].id
	id.Groups = slices.Clone(id.Groups)
	return id, true
}

// Len is the number of tokens in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.list())
}

func (s *Set) list() []entry {
	if p := s.entries.Load(); p != nil {
		return *p
	}
	return nil
}

func validID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: an identity is required (who the token stands for, e.g. ana or ana@example.com)", ErrInvalid)
	}
	if !idRE.MatchString(id) {
		return fmt.Errorf("%w: identity %q: use 1-128 letters, digits, '.', '_', '@', '+' or '-'", ErrInvalid, id)
	}
	return nil
}

func cleanGroups(groups []string) ([]string, error) {
	var out []string
	for _, g := range groups {
		g = strings.TrimSpace(g)
		if g == "" {
			continue
		}
		if !groupRE.MatchString(g) {
			return nil, fmt.Errorf("%w: group %q: use 1-64 letters, digits, '.', '_' or '-'", ErrInvalid, g)
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: at least one group is required (the groups whose approvals the token may decide, e.g. adjusters)", ErrInvalid)
	}
	return out, nil
}

func read(path string) (*file, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read token file: %w", err)
	}
	f := &file{}
	if len(bytes.TrimSpace(b)) == 0 {
		return f, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		return nil, fmt.Errorf("token file %s is not valid: %w (expected {\"tokens\": [{\"id\", \"groups\", \"sha256\", \"created_at\"}]})", path, err)
	}
	// Whatever follows the object (a second one from a bad merge) would be
	// dropped without a word, and with it the tokens it holds.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("token file %s is not valid: data after the {\"tokens\": [...]} object: keep one object per file", path)
	}
	return f, nil
}

// keepMode gives tmp the mode and owner of the file at path (an approver
// running as another user must still read it after a revoke), or 0600
// and ours for a new file.
func keepMode(tmp *os.File, path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return tmp.Chmod(0o600)
	}
	if err != nil {
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid()) {
		if err := tmp.Chown(int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("keep the owner of %s (%d:%d): %w", path, st.Uid, st.Gid, err)
		}
	}
	return nil
}

// write replaces path atomically: a temp file in the same directory,
// fsynced, renamed over path, and the directory fsynced.
func write(path string, f *file) error {
	if f.Tokens == nil {
		f.Tokens = []Entry{} // "tokens": [], not null: Watch tells them apart
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := keepMode(tmp, path); err != nil {
		tmp.Close()
		return fmt.Errorf("write token file: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write token file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write token file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
