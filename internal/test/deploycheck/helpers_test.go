package deploycheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/durable-run/durable/internal/test/testenv"
)

// repoRoot is the directory of go.mod, found upwards from the test's
// working directory (the package directory).
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// deployPath is a path under deploy/.
func deployPath(t testing.TB, elem ...string) string {
	t.Helper()
	return filepath.Join(append([]string{repoRoot(t), "deploy"}, elem...)...)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeMutated copies src to a temp dir (keeping its base name), with the
// first occurrence of old replaced by new, and returns the copy's path.
// The replacement must happen: a mutation test that mutates nothing
// proves nothing.
func writeMutated(t testing.TB, src, old, new string) string {
	t.Helper()
	b := readFile(t, src)
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q to mutate", src, old)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

var (
	helpMu sync.Mutex
	helps  = map[string]map[string]bool{}
)

// flagLineRE matches a flag's line in the flag package's usage output:
// two spaces, a dash, the name, then its value name or the end.
var flagLineRE = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9-]*)(?:\s|$)`)

// durableFlags returns the flags `durable <sub> -h` lists.
func durableFlags(t testing.TB, sub string) map[string]bool {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helps[sub]; ok {
		return f
	}
	out, _ := exec.Command(testenv.DurableBin(t), sub, "-h").CombinedOutput() // -h exits non-zero
	flags := map[string]bool{}
	for _, m := range flagLineRE.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("durable %s -h lists no flags:\n%s", sub, out)
	}
	helps[sub] = flags
	return flags
}

// checkArgs checks that args, a durable command line (subcommand first),
// uses only flags the subcommand has.
func checkArgs(t testing.TB, where string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no command", where)
		return
	}
	sub := args[0]
	switch sub {
	case "worker", "scheduler", "approver":
	default:
		t.Errorf("%s: command %q is not a durable service (worker, scheduler, approver)", where, sub)
		return
	}
	flags := durableFlags(t, sub)
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: durable %s has no flag --%s (durable %s -h)", where, sub, name, sub)
		}
	}
}

// flagValue is the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		n := strings.TrimLeft(a, "-")
		if n == a {
			continue
		}
		if k, v, ok := strings.Cut(n, "="); ok && k == name {
			return v, true
		}
		if n == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

var (
	envOnce  sync.Once
	envNames map[string]bool
	envErr   error
)

var envLiteralRE = regexp.MustCompile(`"(DURABLE_[A-Z0-9_]+)"`)

// knownEnv reports whether name is read by durable: it appears as a Go
// string literal in a non-test source file of cmd/, internal/ or pkg/.
func knownEnv(t testing.TB, name string) bool {
	t.Helper()
	envOnce.Do(func() {
		envNames = map[string]bool{}
		root := repoRoot(t)
		for _, dir := range []string{"cmd", "internal", "pkg"} {
			envErr = filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
					return err
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				for _, m := range envLiteralRE.FindAllSubmatch(b, -1) {
					envNames[string(m[1])] = true
				}
				return nil
			})
			if envErr != nil {
				return
			}
		}
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return envNames[name]
}

// checkEnv checks that a durable container's environment variable is one
// durable reads (a misspelt name would be silently ignored).
func checkEnv(t testing.TB, where, name string) {
	t.Helper()
	if strings.HasPrefix(name, "DURABLE_") && !knownEnv(t, name) {
		t.Errorf("%s: environment variable %s is not read by durable (no Go source names it)", where, name)
	}
}

var ackWaitDefaultRE = regexp.MustCompile(`(?m)^  -ack-wait duration\n.*\(default ([^)]+)\)`)

// The consumer files carry the worker's ack wait: the --ack-wait default
// of the binary.
func TestConsumerAckWaitIsWorkerDefault(t *testing.T) {
	out, _ := exec.Command(testenv.DurableBin(t), "worker", "-h").CombinedOutput()
	m := ackWaitDefaultRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("durable worker -h shows no --ack-wait default:\n%s", out)
	}
	if string(m[1]) != workerAckWait.String() {
		t.Errorf("durable worker --ack-wait defaults to %s; deploy/nats/consumers are generated with %s", m[1], workerAckWait)
	}
}
