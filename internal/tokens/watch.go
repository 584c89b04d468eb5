package tokens

import (
	"context"
	"fmt"
	"os"
	"time"
)

// WatchInterval is how often Watch looks at the token file.
const WatchInterval = 2 * time.Second

// Watch keeps s in step with the token file at path until ctx ends: every
// interval it looks at the file and, when it is another file (replaced, as
// Create and Revoke replace it) or its size or modification time changed,
// loads it and swaps the tokens s holds for the file's. A token created
// works, and one revoked stops working, within an interval, without a
// restart. A file that does not load (a hand edit half done, a syntax
// error, a missing file) leaves the tokens in use as they are, until the
// file changes again; so does a file without a tokens list (blank, being
// rewritten in place), while {"tokens": []} revokes every token. Watch
// starts from the version of the file that Load read. report, if not nil,
// is told of each reload (the number of tokens, nil) and each refusal (0,
// the error).
func (s *Set) Watch(ctx context.Context, path string, interval time.Duration, report func(n int, err error)) {
	if report == nil {
		report = func(int, error) {}
	}
	last := s.file
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(path)
		if sameFile(last, fi) {
			continue
		}
		last = fi
		if err != nil {
			report(0, err)
			continue
		}
		loaded, f, err := load(path)
		if err != nil {
			report(0, err)
			continue
		}
		if f.Tokens == nil {
			// Empty or blank (an editor rewriting it in place, most
			// likely), {} or {"tokens": null}: revoking every token
			// meanwhile would lock everyone out.
			report(0, fmt.Errorf("token file %s has no tokens list; {\"tokens\": []} revokes every token", path))
			continue
		}
		s.entries.Store(loaded.entries.Load())
		report(loaded.Len(), nil)
	}
}

// sameFile says whether a and b (either may be nil: the file was missing)
// are the same file, unchanged.
func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
