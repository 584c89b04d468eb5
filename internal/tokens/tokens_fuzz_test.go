package tokens

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzLoad: no token file panics Load, and every identity it loads is
// valid: a good id, once, with clean distinct groups and a digest no
// other identity has, and the file was one JSON object.
func FuzzLoad(f *testing.F) {
	const digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	f.Add([]byte(`{"tokens": [{"id": "ana", "groups": ["adjusters"], "sha256": "` + digest + `", "created_at": "2026-01-02T03:04:05Z"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "ana@example.com", "groups": [" adjusters ", "claims", "claims", ""], "sha256": "` + digest + `"},` +
		`{"id": "bo.b+1", "groups": ["claims"], "sha256": "` + digest + `"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "ana", "groups": ["a"], "sha256": "` + digest + `"}, {"id": "ana", "groups": ["b"], "sha256": "` + digest + `"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "erp:olga", "groups": ["a"], "sha256": "` + digest + `"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "ana", "groups": [], "sha256": "` + digest + `"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "ana", "groups": ["a b"], "sha256": "` + digest + `"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "ana", "groups": ["a"], "sha256": "DUR_not-a-digest"}]}`))
	f.Add([]byte(`{"tokens": [{"id": "ana", "groups": ["a"], "sha256": "` + digest + `", "token": "dur_x"}]}`))
	f.Add([]byte(`{"tokens": []} {"tokens": [{"id": "ana", "groups": ["a"], "sha256": "` + digest + `"}]}`))
	f.Add([]byte(`{"tokens": null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(" \n"))
	f.Add([]byte{0xff})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "tokens.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Load(path)
		if err != nil {
			if s != nil {
				t.Fatalf("error %v with a set of %d", err, s.Len())
			}
			return
		}
		if len(bytes.TrimSpace(data)) > 0 && !json.Valid(data) {
			t.Fatalf("loaded %d tokens from a file that is not one JSON value: %q", len(s.list()), data)
		}
		seen := map[string]bool{}
		digests := map[[32]byte]string{}
		for _, e := range s.list() {
			id := e.id
			if validID(id.ID) != nil || seen[id.ID] {
				t.Fatalf("loaded identity %q (seen before: %t)", id.ID, seen[id.ID])
			}
			seen[id.ID] = true
			if len(id.Groups) == 0 {
				t.Fatalf("identity %s loaded with no group", id.ID)
			}
			for i, g := range id.Groups {
				if !groupRE.MatchString(g) || slices.Contains(id.Groups[:i], g) {
					t.Fatalf("identity %s loaded with groups %q", id.ID, id.Groups)
				}
			}
			if other, dup := digests[e.digest]; dup {
				t.Fatalf("identities %s and %s loaded with one digest", other, id.ID)
			}
			digests[e.digest] = id.ID
		}
		if s.Len() != len(s.list()) {
			t.Fatalf("Len %d, %d entries", s.Len(), len(s.list()))
		}
	})
}
