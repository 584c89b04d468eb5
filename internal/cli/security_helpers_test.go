package cli_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/testenv"
)

// confServer is a nats-server process started from a config file.
type confServer struct {
	URL  string
	Port int
	log  string
}

// startNATSConf runs the module's nats-server with the config conf,
// rendered into a temp dir with a free loopback port and monitoring port
// and its JetStream store in a temp dir; env is added to the process
// environment (the config's $VARIABLES).
func startNATSConf(t *testing.T, conf string, env ...string) *confServer {
	t.Helper()
	text, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	// A free port can be taken by another test process between the probe
	// and the server's bind: start again on new ports when that happens.
	for attempt := 1; ; attempt++ {
		s, exited := startNATSConfOnce(t, string(text), conf, env)
		if attempt < 3 && lostPortRace(s, exited) {
			continue
		}
		waitListening(t, "tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), s.log, exited)
		return s
	}
}

// lostPortRace reports whether the server exited because its port was
// taken meanwhile (it waits until the server listens or exits).
func lostPortRace(s *confServer, exited <-chan struct{}) bool {
	for range 200 {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port)); err == nil {
			c.Close()
			return false
		}
		select {
		case <-exited:
			return strings.Contains(s.Log(), "address already in use")
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// startNATSConfOnce renders conf on new ports and starts nats-server on it.
func startNATSConfOnce(t *testing.T, text, conf string, env []string) (*confServer, <-chan struct{}) {
	t.Helper()
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	rendered := text
	for _, r := range []struct{ re, repl string }{
		{`(?m)^port:.*$`, fmt.Sprintf("port: %d", port)},
		{`(?m)^http_port:.*$`, fmt.Sprintf("http_port: %d", mport)},
		{`(?m)^(\s*)store_dir:.*$`, fmt.Sprintf("${1}store_dir: %q", filepath.Join(dir, "js"))},
	} {
		re := regexp.MustCompile(r.re)
		if !re.MatchString(rendered) {
			t.Fatalf("%s: no line matches %s", conf, r.re)
		}
		rendered = re.ReplaceAllString(rendered, r.repl)
	}
	path := writeFile(t, dir, "nats-server.conf", rendered)
	s := &confServer{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Port: port, log: filepath.Join(dir, "nats.log")}
	cmd := exec.Command(testenv.NATSServerBin(t), "-c", path, "-a", "127.0.0.1")
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	exited := waitProcess(cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logf.Close()
	})
	return s, exited
}

// waitProcess returns a channel closed when cmd has exited.
func waitProcess(cmd *exec.Cmd) <-chan struct{} {
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return exited
}

// Log is the server's log so far.
func (s *confServer) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// startRedisProc runs redis-server with args on a unix socket in a temp
// dir; unlike testenv.StartRedis it does not expect an unauthenticated
// PING to work. It returns the socket path.
func startRedisProc(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH: install it (apt-get install redis-server)")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	logPath := filepath.Join(dir, "redis.log")
	all := append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
		"--dir", dir, "--bind", "127.0.0.1", "--logfile", logPath}, args...)
	cmd := exec.Command(bin, all...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := waitProcess(cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitListening(t, "unix", sock, logPath, exited)
	return sock
}

func waitListening(t *testing.T, network, addr, logPath string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial(network, addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("server exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("server did not listen on %s: %s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pki is a test CA with a server certificate for 127.0.0.1/localhost and
// a client certificate, as PEM files.
type pki struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCA signed nothing here: trusting it must fail verification.
	OtherCA string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caPEM := newCA(t, "durable test CA")
	_, _, otherPEM := newCA(t, "some other CA")
	p := pki{CA: writeFile(t, dir, "ca.pem", caPEM), OtherCA: writeFile(t, dir, "other-ca.pem", otherPEM)}
	p.ServerCert, p.ServerKey = leaf(t, dir, "server", caKey, caCert, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = leaf(t, dir, "client", caKey, caCert, x509.ExtKeyUsageClientAuth)
	return p
}

var serial struct {
	sync.Mutex
	n int64
}

func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	serial.n++
	return big.NewInt(time.Now().UnixNano() + serial.n)
}

func newCA(t *testing.T, name string) (*ecdsa.PrivateKey, *x509.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func leaf(t *testing.T, dir, name string, caKey *ecdsa.PrivateKey, ca *x509.Certificate, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, dir, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyFile = writeFile(t, dir, name+"-key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})))
	return certFile, keyFile
}

// syncBuffer collects a component's log lines written from many
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// clearConnEnv empties every connection setting the CLI reads from env, so
// that nothing from the outer environment changes what a test connects to.
func clearConnEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{
		"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_CRASH",
		"DURABLE_NATS_CREDS", "DURABLE_NATS_NKEY", "DURABLE_NATS_USER", "DURABLE_NATS_PASSWORD",
		"DURABLE_NATS_TLS_CA", "DURABLE_NATS_TLS_CERT", "DURABLE_NATS_TLS_KEY", "DURABLE_NATS_INBOX_PREFIX",
		"DURABLE_REDIS_TLS_CA", "DURABLE_REDIS_TLS_CERT", "DURABLE_REDIS_TLS_KEY", "DURABLE_REPLICAS",
	} {
		t.Setenv(k, "")
	}
}

// execNATS is the module's nats-server binary with args.
func execNATS(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(testenv.NATSServerBin(t), args...)
}
