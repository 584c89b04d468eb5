package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// durable token create, list and revoke on one file; refusals exit 2 and
// leave the file as it was.
func TestTokenCommands(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	for _, id := range []string{"ana", "pat"} {
		groups := map[string]string{"ana": "adjusters", "pat": "operators,adjusters"}[id]
		if r := runCLI("token", "create", "--file", file, "--id", id, "--groups", groups); r.code != 0 || !strings.HasPrefix(r.stdout, "dur_") {
			t.Fatalf("token create %s: %s", id, r)
		}
	}
	digest := regexp.MustCompile(`[0-9a-f]{64}`)
	r := runCLI("token", "list", "--file", file)
	if r.code != 0 || !strings.Contains(r.stdout, "pat") || !strings.Contains(r.stdout, "operators,adjusters") {
		t.Fatalf("token list: %s", r)
	}
	if digest.MatchString(r.stdout) {
		t.Errorf("token list prints digests: %s", r.stdout)
	}
	r = runCLI("token", "list", "--file", file, "--json")
	var list struct {
		Tokens []struct {
			ID     string   `json:"id"`
			Groups []string `json:"groups"`
		} `json:"tokens"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Tokens) != 2 || list.Tokens[1].ID != "pat" || len(list.Tokens[1].Groups) != 2 {
		t.Fatalf("token list --json: %s", r)
	}
	if strings.Contains(r.stdout, "sha256") || digest.MatchString(r.stdout) {
		t.Errorf("token list prints digests: %s", r.stdout)
	}
	if r := runCLI("token", "revoke", "--file", file, "--id", "ana"); r.code != 0 || !strings.Contains(r.stderr, "revoked") {
		t.Fatalf("token revoke: %s", r)
	}
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"token"},
		{"token", "delete", "--file", file, "--id", "pat"},
		{"token", "revoke", "--file", file, "--id", "ana"}, // revoked already
		{"token", "revoke", "--file", file},
		{"token", "revoke", "--file", file, "--id", "bad id"},
		{"token", "list"},
		{"token", "list", "--file", file + ".absent"},
		{"token", "revoke", "--file", file + ".absent", "--id", "pat"},
	} {
		if r := runCLI(args...); r.code != 2 {
			t.Errorf("durable %s: %s, want exit 2", strings.Join(args, " "), r)
		}
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Error("a refused token command changed the file")
	}
	if r := runCLI("token", "list", "--file", file, "--json"); r.code != 0 || strings.Contains(r.stdout, `"ana"`) {
		t.Errorf("ana still listed after the revoke: %s", r)
	}
}
