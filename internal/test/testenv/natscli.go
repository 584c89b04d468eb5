package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// NATSCLIVersion is the nats CLI the replay recipes (docs/replay.md) are written
// for and tested with.
const NATSCLIVersion = "v0.5.0"

var natsCLI struct {
	once sync.Once
	path string
	err  error
}

// InstallNATSCLI installs github.com/nats-io/natscli/nats at NATSCLIVersion
// with `go install` into a temp GOBIN and keeps the binary in the user's
// cache dir ($HOME/.cache/durable/natscli-<version>/nats), so later runs
// reuse it. It runs once per test binary and is safe to call from any
// goroutine; the first install takes about a minute (module download
// and build).
func InstallNATSCLI() (string, error) {
	natsCLI.once.Do(func() { natsCLI.path, natsCLI.err = installNATSCLI() })
	return natsCLI.path, natsCLI.err
}

// NATSCLI returns the path of the nats CLI, installing it on first use.
// It skips the test when the CLI cannot be installed (no module proxy).
func NATSCLI(tb testing.TB) string {
	tb.Helper()
	p, err := InstallNATSCLI()
	if err != nil {
		tb.Skipf("nats CLI %s cannot be installed, so the replay recipes are untested here: %v", NATSCLIVersion, err)
	}
	return p
}

func installNATSCLI() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "durable", "natscli-"+NATSCLIVersion)
	bin := filepath.Join(dir, "nats")
	if out, err := exec.Command(bin, "--version").Output(); err == nil && string(out) == NATSCLIVersion+"\n" {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	gobin, err := os.MkdirTemp(dir, "install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(gobin)
	cmd := exec.Command("go", "install", "github.com/nats-io/natscli/nats@"+NATSCLIVersion)
	// Outside this module, so its go.mod and vendoring play no part.
	cmd.Dir = gobin
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install github.com/nats-io/natscli/nats@%s: %v\n%s", NATSCLIVersion, err, out)
	}
	// Rename is atomic: a concurrent test binary sees the old or the new
	// file, never half of one.
	if err := os.Rename(filepath.Join(gobin, "nats"), bin); err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	if string(out) != NATSCLIVersion+"\n" {
		return "", errors.New("installed nats CLI reports version " + string(out))
	}
	return bin, nil
}
