package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// NATSServerBin builds the nats-server binary from the module (the same
// version the embedded server uses) once per test binary.
func NATSServerBin(tb testing.TB) string {
	tb.Helper()
	return Binary(tb, "github.com/nats-io/nats-server/v2")
}

// NATSProcess is a nats-server running as its own process.
type NATSProcess struct {
	URL  string
	Port int
	Dir  string
	cmd  *exec.Cmd
}

// StartNATSProcess runs nats-server -js on a free 127.0.0.1 port with its
// store in a temp dir, stopped at cleanup.
func StartNATSProcess(tb testing.TB) *NATSProcess {
	tb.Helper()
	bin := NATSServerBin(tb)
	dir := tb.TempDir()
	port := freePort(tb)
	p := &NATSProcess{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Port: port, Dir: dir}
	p.cmd = exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", filepath.Join(dir, "js"))
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		tb.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		_ = logf.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "nats.log"))
			tb.Fatalf("nats-server did not come up: %s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
