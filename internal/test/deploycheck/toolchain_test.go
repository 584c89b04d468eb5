package deploycheck

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Go toolchain durable builds with is named alike where it is set
// (the Makefile, deploy/Dockerfile), and the README's first commands set
// it before anything else: a newcomer types what the build needs, not a
// Go version that builds with a vulnerable standard library (issue 25).
func TestToolchainNamedAlike(t *testing.T) {
	root := repoRoot(t)
	find := func(file, pattern string) string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindSubmatch(readFile(t, filepath.Join(root, file)))
		if m == nil {
			t.Fatalf("%s does not match %s", file, pattern)
		}
		return string(m[1])
	}
	want := find("Makefile", `(?m)^export GOTOOLCHAIN \?= (go\S+)$`)
	if got := find("deploy/Dockerfile", `(?m)^ARG GOTOOLCHAIN=(\S+)$`); got != want {
		t.Errorf("deploy/Dockerfile builds with %s, the Makefile with %s", got, want)
	}
	// The first shell block of the README's "Two commands".
	block := find("README.md", "(?s)\n## Two commands\n.*?```sh\n(.*?)```")
	first, _, _ := strings.Cut(block, "\n")
	if cmd, _, _ := strings.Cut(first, "#"); strings.TrimSpace(cmd) != "export GOTOOLCHAIN="+want {
		t.Errorf("README.md: the first command of \"Two commands\" is %q, want export GOTOOLCHAIN=%s", first, want)
	}
}
