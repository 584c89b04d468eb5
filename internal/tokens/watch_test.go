package tokens_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/tokens"
)

// reports records what Watch reports.
type reports struct {
	mu   sync.Mutex
	errs []error
	ns   []int
}

func (r *reports) add(n int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ns = append(r.ns, n)
	r.errs = append(r.errs, err)
}

func (r *reports) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ns)
}

func (r *reports) last() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ns[len(r.ns)-1], r.errs[len(r.errs)-1]
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, what, cond)
}

// replace writes content to path as one change (a temp file renamed).
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tokenFile creates a token file with a token of group adjusters for each
// of ids, and returns its path and the tokens.
func tokenFile(t *testing.T, ids ...string) (string, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	var toks []string
	for _, id := range ids {
		tok, err := tokens.Create(path, id, []string{"adjusters"})
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	return path, toks
}

func load(t *testing.T, path string) *tokens.Set {
	t.Helper()
	set, err := tokens.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// watch runs set.Watch on path until the test ends, looking every 10ms.
func watch(t *testing.T, set *tokens.Set, path string, report func(int, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { set.Watch(ctx, path, 10*time.Millisecond, report); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
}

// A running approver's tokens follow the file: a token created works and
// one revoked stops working without a restart; a broken file changes
// nothing until it is mended.
func TestWatchFollowsTheFile(t *testing.T) {
	path, toks := tokenFile(t, "ana")
	ana, set := toks[0], load(t, path)
	var r reports
	watch(t, set, path, r.add)

	pat, err := tokens.Create(path, "pat", []string{"operators"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the created token works", func() bool {
		who, ok := set.Lookup(pat)
		return ok && who.ID == "pat" && r.count() > 0
	})
	if n, err := r.last(); n != 2 || err != nil {
		t.Errorf("reported %d, %v after a create; want 2 tokens", n, err)
	}

	if err := tokens.Revoke(path, "ana"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the revoked token is refused", func() bool {
		_, ok := set.Lookup(ana)
		return !ok
	})
	if _, ok := set.Lookup(pat); !ok {
		t.Error("revoking ana revoked pat too")
	}

	// A broken file: the tokens in use stay, the refusal is reported once.
	before := r.count()
	replace(t, path, `{"tokens": [`)
	eventually(t, "the broken file reported", func() bool { return r.count() > before })
	if n, err := r.last(); n != 0 || err == nil {
		t.Errorf("reported %d, %v for a broken file; want an error", n, err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := r.count(); got != before+1 {
		t.Errorf("%d reports for one broken version of the file, want 1", got-before)
	}
	if _, ok := set.Lookup(pat); !ok || set.Len() != 1 {
		t.Errorf("a broken file changed the tokens in use (%d)", set.Len())
	}

	// No tokens list (an editor rewriting it in place, a stray {}): the
	// same. Only {"tokens": []} revokes everyone (TestWatchRevokesAll).
	for _, content := range []string{"", "\n", "{}", "null", `{"tokens": null}`} {
		before = r.count()
		replace(t, path, content)
		eventually(t, fmt.Sprintf("the file %q reported", content), func() bool { return r.count() > before })
		if _, ok := set.Lookup(pat); !ok {
			t.Errorf("a file %q revoked the tokens in use", content)
		}
	}

	// Removed: the same. Back: reloaded.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the missing file reported", func() bool { _, err := r.last(); return errors.Is(err, os.ErrNotExist) })
	if _, ok := set.Lookup(pat); !ok {
		t.Error("a missing file revoked the tokens in use")
	}
	bo, err := tokens.Create(path, "bo", []string{"adjusters"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new file loaded", func() bool { _, ok := set.Lookup(bo); return ok })
	if _, ok := set.Lookup(pat); ok {
		t.Error("pat's token works although the file no longer has it")
	}
}

func TestRevokeAndEntries(t *testing.T) {
	path, _ := tokenFile(t, "ana", "bo", "cy")
	if err := tokens.Revoke(path, "bo"); err != nil {
		t.Fatal(err)
	}
	es, err := tokens.Entries(path)
	if err != nil || len(es) != 2 || es[0].ID != "ana" || es[1].ID != "cy" {
		t.Fatalf("entries after revoking bo: %+v, %v", es, err)
	}
	before, _ := os.ReadFile(path)
	if err := tokens.Revoke(path, "bo"); !errors.Is(err, tokens.ErrUnknownID) {
		t.Errorf("revoke bo twice: %v, want ErrUnknownID", err)
	}
	if err := tokens.Revoke(path, "bad id"); !errors.Is(err, tokens.ErrInvalid) {
		t.Errorf("revoke an invalid id: %v, want ErrInvalid", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("a refused revoke changed the file")
	}
	if err := tokens.Revoke(filepath.Join(t.TempDir(), "absent.json"), "ana"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("revoke in a missing file: %v, want not exist", err)
	}
}

// {"tokens": []} is not an empty file: it revokes every token.
func TestWatchRevokesAll(t *testing.T) {
	path, toks := tokenFile(t, "ana")
	ana, set := toks[0], load(t, path)
	watch(t, set, path, nil)
	if err := tokens.Revoke(path, "ana"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the last token revoked", func() bool { _, ok := set.Lookup(ana); return !ok })
}

// Watch starts from the version of the file Load read: a revoke between
// Load and Watch's start is not missed.
func TestWatchStartsFromTheLoadedFile(t *testing.T) {
	path, toks := tokenFile(t, "ana", "bo")
	ana, set := toks[0], load(t, path)
	if err := tokens.Revoke(path, "ana"); err != nil { // before Watch runs
		t.Fatal(err)
	}
	watch(t, set, path, nil)
	eventually(t, "the revoke made before Watch started", func() bool { _, ok := set.Lookup(ana); return !ok })
}

// A revoke keeps the file readable by whoever read it before (its mode),
// and refuses to rewrite a file the approver could not load.
func TestRevokeKeepsModeAndRefusesBadFiles(t *testing.T) {
	path, _ := tokenFile(t, "ana", "bo")
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Revoke(path, "ana"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after a revoke: %v, %v; want 0640 as before", fi.Mode().Perm(), err)
	}
	// An entry the approver refuses (a token in place of its digest).
	bad := `{"tokens": [{"id": "bo", "groups": ["adjusters"], "sha256": "dur_plain", "created_at": "2026-01-01T00:00:00Z"}, {"id": "cy", "groups": ["adjusters"], "sha256": "` + strings.Repeat("a", 64) + `", "created_at": "2026-01-01T00:00:00Z"}]}`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Revoke(path, "cy"); !errors.Is(err, tokens.ErrInvalid) {
		t.Errorf("revoke in a file that does not load: %v, want ErrInvalid", err)
	}
	if _, err := tokens.Create(path, "dee", []string{"adjusters"}); !errors.Is(err, tokens.ErrInvalid) {
		t.Errorf("create in a file that does not load: %v, want ErrInvalid", err)
	}
	if b, _ := os.ReadFile(path); string(b) != bad {
		t.Error("a file that does not load was rewritten")
	}
}
