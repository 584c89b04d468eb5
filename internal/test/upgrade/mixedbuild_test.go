package upgrade

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durable-run/durable/internal/test/testenv"
)

// mixedWorkerPkg is the main of TestMixedFleet's workers, in testdata so
// that `go build ./...` leaves it alone.
const mixedWorkerPkg = "internal/test/upgrade/testdata/mixedworker"

// mixedSources are the files of this checkout that the worker of the
// previous release is built with: its main and the workflows it runs
// (both compile against that release's pkg/steps and pkg/workercmd).
var mixedSources = []string{"workflows.go", "mixed.go", "testdata/mixedworker/main.go"}

// buildMixedWorkers builds the worker of the previous release
// (fixtureRelease) and the worker of this checkout. It skips the test,
// saying what is missing, when the previous release's tree cannot be had
// (no git, no repository, a shallow clone without the commit) or its
// modules cannot be downloaded; a build that fails is a failure.
func buildMixedWorkers(t *testing.T) (old, cur string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("TestMixedFleet builds the worker of %s from the repository's history, and git is not installed: %v", fixtureRelease, err)
	}
	root, err := gitOut("", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("TestMixedFleet builds the worker of %s from the repository's history, and this is no git checkout: %v", fixtureRelease, err)
	}
	if _, err := gitOut(root, "cat-file", "-e", fixtureRelease+"^{commit}"); err != nil {
		shallow, _ := gitOut(root, "rev-parse", "--is-shallow-repository")
		t.Skipf("TestMixedFleet needs commit %s (the previous release) in the repository at %s, which lacks it (shallow clone: %s); fetch the history (git fetch --unshallow) to run it", fixtureRelease, root, shallow)
	}
	tree := releaseTree(t, root)
	if out, err := goCommand(tree, "mod", "download").CombinedOutput(); err != nil {
		t.Skipf("TestMixedFleet cannot download the modules of %s's go.mod (offline, no module proxy?): %v\n%s", fixtureRelease, err, out)
	}
	old = filepath.Join(t.TempDir(), "mixedworker-"+fixtureRelease)
	if out, err := goCommand(tree, "build", "-o", old, "./"+mixedWorkerPkg).CombinedOutput(); err != nil {
		t.Fatalf("build the worker of %s in %s: %v\n%s", fixtureRelease, tree, err, out)
	}
	return old, testenv.Binary(t, "github.com/durable-run/durable/"+mixedWorkerPkg)
}

// releaseTree is the tree of fixtureRelease with mixedSources copied in,
// in a directory named for the release and the sources' contents and
// kept between runs: the go command caches what it compiles by the
// directory's path, so a second run builds in a second, not twenty.
// Test binaries running at once each write a tree of their own and move
// it in place; the first one wins.
func releaseTree(t *testing.T, root string) string {
	t.Helper()
	sum := sha256.New()
	sum.Write([]byte(fixtureRelease))
	srcs := map[string][]byte{}
	for _, name := range mixedSources {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		srcs[name] = b
		sum.Write([]byte(name))
		sum.Write(b)
	}
	final := filepath.Join(os.TempDir(), "durable-upgrade-"+fixtureRelease+"-"+hex.EncodeToString(sum.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(final, "go.mod")); err == nil {
		return final
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "durable-upgrade-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	archive := exec.Command("git", "archive", "--format=tar", fixtureRelease)
	archive.Dir = root
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", fixtureRelease, err, stderr.String())
	}
	if err := extract(&tarball, tmp); err != nil {
		t.Fatalf("unpack git archive %s: %v", fixtureRelease, err)
	}
	for name, b := range srcs {
		if err := writeFile(filepath.Join(tmp, "internal/test/upgrade", name), bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "go.mod")); serr != nil {
			t.Fatalf("move the tree of %s in place: %v", fixtureRelease, err)
		}
	}
	return final
}

// goCommand is the go command run in dir, outside any workspace, without
// VCS stamping (the release's tree is no checkout).
func goCommand(dir string, args ...string) *exec.Cmd {
	if args[0] == "build" {
		args = append([]string{"build", "-buildvcs=false"}, args[1:]...)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	return cmd
}

// gitOut runs git in dir ("" for the test's) and returns its output,
// trimmed.
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.Join(err, errors.New(strings.TrimSpace(stderr.String())))
	}
	return strings.TrimSpace(string(out)), nil
}
