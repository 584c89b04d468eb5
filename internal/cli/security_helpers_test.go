package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
)

// confServer is a nats-server process started from a config file.
type confServer struct {
	*testenv.NATSServer
}

// startNATSConf runs the module's nats-server with the config conf on a
// free loopback port and monitoring port, its JetStream store in a temp
// dir (testenv sets those, whatever conf says); env is added to the
// process environment (the config's $VARIABLES).
func startNATSConf(t *testing.T, conf string, env ...string) *confServer {
	t.Helper()
	return &confServer{testenv.StartNATSServer(t, testenv.NATSConfigFile(conf), testenv.NATSEnv(env...))}
}

// Log is the server's log so far.
func (s *confServer) Log() string {
	logs := s.Logs()
	b, _ := os.ReadFile(logs[len(logs)-1])
	return string(b)
}

// startRedisProc runs redis-server with args on a unix socket in a temp
// dir, up once it answers (NOAUTH when args ask for credentials), and
// returns the socket path.
func startRedisProc(t *testing.T, args ...string) string {
	t.Helper()
	return testenv.StartRedisServer(t, testenv.RedisUnixSocket(), testenv.RedisArgs(args...)).Sock
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

// execNATS is the module's nats-server binary with args, for what starts
// no server (-t checks a config file).
func execNATS(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(testenv.NATSServerBin(t), args...)
}
