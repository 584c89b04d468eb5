package tokens_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durable-run/durable/internal/tokens"
)

func TestCreateLoadLookup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	ana, err := tokens.Create(path, "ana", []string{"adjusters", " supervisors ", "adjusters"})
	if err != nil {
		t.Fatal(err)
	}
	bo, err := tokens.Create(path, "bo@example.com", []string{"claims"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ana, tokens.Prefix) || len(ana) != len(tokens.Prefix)+43 || ana == bo {
		t.Fatalf("tokens %q %q", ana, bo)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{ana, bo, strings.TrimPrefix(ana, tokens.Prefix), strings.TrimPrefix(bo, tokens.Prefix)} {
		if strings.Contains(string(raw), tok) {
			t.Fatalf("the token file holds a token: %s", raw)
		}
	}
	set, err := tokens.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != 2 {
		t.Fatalf("Len %d", set.Len())
	}
	who, ok := set.Lookup(ana)
	if !ok || who.ID != "ana" || strings.Join(who.Groups, ",") != "adjusters,supervisors" {
		t.Fatalf("Lookup(ana) = %+v, %v", who, ok)
	}
	who.Groups[0] = "root" // the set hands out copies
	if who, _ := set.Lookup(ana); who.Groups[0] != "adjusters" {
		t.Fatalf("Lookup returned the set's own slice")
	}
	if who, ok := set.Lookup(bo); !ok || who.ID != "bo@example.com" {
		t.Fatalf("Lookup(bo) = %+v, %v", who, ok)
	}
	for _, bad := range []string{"", "dur_", ana + "x", ana[:len(ana)-1], strings.TrimPrefix(ana, tokens.Prefix), strings.ToUpper(ana)} {
		if who, ok := set.Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %+v", bad, who)
		}
	}
	var nilSet *tokens.Set
	if _, ok := nilSet.Lookup(ana); ok {
		t.Errorf("nil set found a token")
	}
}

func TestCreateRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if _, err := tokens.Create(path, "ana", []string{"adjusters"}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name   string
		id     string
		groups []string
		want   error
	}{
		{"empty id", "", []string{"adjusters"}, tokens.ErrInvalid},
		{"blank id", "  ", []string{"adjusters"}, tokens.ErrInvalid},
		{"id with colon (event identities)", "erp:ana", []string{"adjusters"}, tokens.ErrInvalid},
		{"id with space", "ana b", []string{"adjusters"}, tokens.ErrInvalid},
		{"no groups", "cy", nil, tokens.ErrInvalid},
		{"blank groups", "cy", []string{"", " "}, tokens.ErrInvalid},
		{"bad group", "cy", []string{"adj usters"}, tokens.ErrInvalid},
		{"duplicate id", "ana", []string{"claims"}, tokens.ErrDuplicateID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := tokens.Create(path, tc.id, tc.groups)
			if !errors.Is(err, tc.want) || tok != "" {
				t.Fatalf("Create = %q, %v; want %v", tok, err, tc.want)
			}
			after, _ := os.ReadFile(path)
			if string(after) != string(before) {
				t.Fatalf("a refused Create changed the file")
			}
		})
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
}

func TestLoadRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := tokens.Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "durable token create") {
		t.Fatalf("missing file: %v", err)
	}
	digest := strings.Repeat("ab", 32)
	for name, body := range map[string]string{
		"not json":      `{"tokens": [`,
		"unknown field": `{"tokens": [{"id": "ana", "groups": ["g"], "sha256": "` + digest + `", "token": "dur_x"}]}`,
		"plain token":   `{"tokens": [{"id": "ana", "groups": ["g"], "sha256": "dur_abc"}]}`,
		"no groups":     `{"tokens": [{"id": "ana", "groups": [], "sha256": "` + digest + `"}]}`,
		"no id":         `{"tokens": [{"groups": ["g"], "sha256": "` + digest + `"}]}`,
		"duplicate id":  `{"tokens": [{"id": "ana", "groups": ["g"], "sha256": "` + digest + `"}, {"id": "ana", "groups": ["h"], "sha256": "` + strings.Repeat("cd", 32) + `"}]}`,
		"shared digest": `{"tokens": [{"id": "ana", "groups": ["g"], "sha256": "` + digest + `"}, {"id": "bob", "groups": ["h"], "sha256": "` + digest + `"}]}`,
		"two objects":   `{"tokens": []} {"tokens": [{"id": "ana", "groups": ["g"], "sha256": "` + digest + `"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if set, err := tokens.Load(path); err == nil {
				t.Fatalf("Load accepted %s: %d tokens", body, set.Len())
			}
		})
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if set, err := tokens.Load(empty); err != nil || set.Len() != 0 {
		t.Fatalf("empty file: %v", err)
	}
}
