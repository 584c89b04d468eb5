package cli_test

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/durable-run/durable/internal/test/testenv"
)

// connects runs `durable runs list` with args: the shortest command that
// opens NATS and the checkpoint store.
func connects(args ...string) result {
	return runCLI(append([]string{"runs", "list", "--json"}, args...)...)
}

func mustConnect(t *testing.T, args ...string) {
	t.Helper()
	if r := connects(args...); r.code != 0 {
		t.Fatalf("durable runs list %s: want exit 0, got %s", strings.Join(args, " "), r)
	}
}

// mustRefuse runs the command, expects exit code want within a few
// seconds (refusals must not wait out the connect retries) and stderr
// saying each of says, and fails if any secret shows.
func mustRefuse(t *testing.T, want int, says []string, secrets []string, args ...string) result {
	t.Helper()
	start := time.Now()
	r := connects(args...)
	if r.code != want {
		t.Fatalf("durable runs list %s: want exit %d, got %s", strings.Join(args, " "), want, r)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("refusal took %s: it should not wait out the retries", d)
	}
	t.Logf("refused: %s", strings.TrimSpace(r.stderr))
	for _, s := range says {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, r.stderr)
		}
	}
	for _, s := range secrets {
		if strings.Contains(r.stdout+r.stderr, s) {
			t.Errorf("output shows the secret %q:\n%s", s, r)
		}
	}
	return r
}

// jsConf is the start of a test server config; startNATSConf sets the
// port, monitoring port and store dir.
const jsConf = "port: 4222\nhttp_port: 8222\njetstream {\n  store_dir: \"/unused\"\n}\n"

// TLS for NATS: a server with a certificate from a private CA is trusted
// with --nats-tls-ca (or its env var) and refused without it; a server
// that verifies clients also wants --nats-tls-cert and --nats-tls-key.
func TestNATSTLS(t *testing.T) {
	clearConnEnv(t)
	p := newPKI(t)
	dir := t.TempDir()

	t.Run("server certificate", func(t *testing.T) {
		conf := writeFile(t, dir, "tls.conf", jsConf+fmt.Sprintf("tls { cert_file: %q, key_file: %q }\n", p.ServerCert, p.ServerKey))
		s := startNATSConf(t, conf)
		mustConnect(t, "--nats", s.URL, "--nats-tls-ca", p.CA)
		mustConnect(t, "--nats", "tls://127.0.0.1:"+fmt.Sprint(s.Port), "--nats-tls-ca", p.CA)
		mustRefuse(t, 1, []string{"certificate", "--nats-tls-ca"}, nil, "--nats", s.URL)
		mustRefuse(t, 1, []string{"certificate", "--nats-tls-ca"}, nil, "--nats", s.URL, "--nats-tls-ca", p.OtherCA)
		t.Setenv("DURABLE_NATS_TLS_CA", p.CA)
		mustConnect(t, "--nats", s.URL)
	})

	t.Run("client certificate", func(t *testing.T) {
		clearConnEnv(t)
		conf := writeFile(t, dir, "mtls.conf", jsConf+fmt.Sprintf("tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }\n",
			p.ServerCert, p.ServerKey, p.CA))
		s := startNATSConf(t, conf)
		mustConnect(t, "--nats", s.URL, "--nats-tls-ca", p.CA, "--nats-tls-cert", p.ClientCert, "--nats-tls-key", p.ClientKey)
		mustRefuse(t, 1, []string{"--nats-tls-cert and --nats-tls-key"}, nil, "--nats", s.URL, "--nats-tls-ca", p.CA)
		mustRefuse(t, 2, []string{"--nats-tls-cert and --nats-tls-key go together"}, nil, "--nats", s.URL, "--nats-tls-ca", p.CA, "--nats-tls-cert", p.ClientCert)
		mustRefuse(t, 2, []string{"--nats-tls-ca", "no such file"}, nil, "--nats", s.URL, "--nats-tls-ca", filepath.Join(dir, "nope.pem"))
	})
}

// Credentials for NATS: user and password (flags, env, or in the URL), an
// nkey seed file, a creds file. Wrong ones fail at once with a hint and
// never show the password.
func TestNATSCredentials(t *testing.T) {
	clearConnEnv(t)
	dir := t.TempDir()

	t.Run("user and password", func(t *testing.T) {
		const pw = "s3cret-nats-pass"
		conf := writeFile(t, dir, "user.conf", jsConf+fmt.Sprintf("authorization { user: ops, password: %q }\n", pw))
		s := startNATSConf(t, conf)
		hostPort := fmt.Sprintf("127.0.0.1:%d", s.Port)
		mustConnect(t, "--nats", s.URL, "--nats-user", "ops", "--nats-password", pw)
		mustConnect(t, "--nats", "nats://ops:"+pw+"@"+hostPort)
		t.Run("from env", func(t *testing.T) {
			t.Setenv("DURABLE_NATS_URL", s.URL)
			t.Setenv("DURABLE_NATS_USER", "ops")
			t.Setenv("DURABLE_NATS_PASSWORD", pw)
			mustConnect(t)
			// The help prints no default taken from env.
			r := runCLI("runs", "list", "-h")
			if !strings.Contains(r.stderr, "--nats-password") || strings.Contains(r.stderr, pw) {
				t.Fatalf("help:\n%s", r)
			}
		})
		secrets := []string{pw, "wrong-pass-123"}
		mustRefuse(t, 1, []string{"Authorization Violation", "--nats-password"}, secrets,
			"--nats", s.URL, "--nats-user", "ops", "--nats-password", "wrong-pass-123")
		mustRefuse(t, 1, []string{"Authorization Violation", "nats://***@" + hostPort}, secrets,
			"--nats", "nats://ops:wrong-pass-123@"+hostPort)
		mustRefuse(t, 1, []string{"Authorization Violation"}, secrets, "--nats", s.URL)
		mustRefuse(t, 2, []string{"--nats-user and --nats-password"}, secrets, "--nats", s.URL, "--nats-user", "ops")
		// URLs that do not parse: url.Parse quotes them, or the piece of
		// the user info it choked on.
		mustRefuse(t, 2, []string{"nats://***@127.0.0.1:port"}, secrets, "--nats", "nats://ops:"+pw+"@127.0.0.1:port")
		mustRefuse(t, 2, []string{"nats://***@"}, secrets, "--nats", "nats://ops:"+pw+"/x@"+hostPort)
		mustRefuse(t, 1, []string{"nats://***@"}, secrets, "--nats", "nats://a:"+pw+"@127.0.0.1:1,nats://b:wrong-pass-123@"+hostPort)
		mustRefuse(t, 2, []string{"not several"}, secrets, "--nats", "nats://ops:"+pw+"@"+hostPort, "--nats-user", "ops", "--nats-password", pw)
	})

	t.Run("nkey", func(t *testing.T) {
		user, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := user.PublicKey()
		seed, _ := user.Seed()
		seedFile := writeFile(t, dir, "user.nk", string(seed))
		other, _ := nkeys.CreateUser()
		otherSeed, _ := other.Seed()
		otherFile := writeFile(t, dir, "other.nk", string(otherSeed))
		conf := writeFile(t, dir, "nkey.conf", jsConf+fmt.Sprintf("authorization { users = [ { nkey: %s } ] }\n", pub))
		s := startNATSConf(t, conf)
		mustConnect(t, "--nats", s.URL, "--nats-nkey", seedFile)
		t.Run("from env", func(t *testing.T) {
			t.Setenv("DURABLE_NATS_NKEY", seedFile)
			mustConnect(t, "--nats", s.URL)
		})
		mustRefuse(t, 1, []string{"Authorization Violation"}, []string{string(otherSeed)}, "--nats", s.URL, "--nats-nkey", otherFile)
		mustRefuse(t, 2, []string{"--nats-nkey", "no such file"}, nil, "--nats", s.URL, "--nats-nkey", filepath.Join(dir, "nope.nk"))
		notSeed := writeFile(t, dir, "not-a-seed.nk", "hello\n")
		mustRefuse(t, 2, []string{"--nats-nkey", "seed"}, nil, "--nats", s.URL, "--nats-nkey", notSeed)
	})

	t.Run("creds file", func(t *testing.T) {
		creds, conf := operatorSetup(t, dir)
		s := startNATSConf(t, conf)
		mustConnect(t, "--nats", s.URL, "--nats-creds", creds)
		t.Run("from env", func(t *testing.T) {
			t.Setenv("DURABLE_NATS_CREDS", creds)
			mustConnect(t, "--nats", s.URL)
		})
		mustRefuse(t, 1, []string{"Authorization Violation"}, nil, "--nats", s.URL)
		mustRefuse(t, 2, []string{"--nats-creds", "no such file"}, nil, "--nats", s.URL, "--nats-creds", filepath.Join(dir, "nope.creds"))
		mustRefuse(t, 2, []string{"not several"}, nil, "--nats", s.URL, "--nats-creds", creds, "--nats-nkey", creds)
	})
}

// operatorSetup writes a decentralized-auth (JWT) server config with one
// account, JetStream enabled, and a creds file of a user of it.
func operatorSetup(t *testing.T, dir string) (creds, conf string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	okp, err := nkeys.CreateOperator()
	must(err)
	opub, _ := okp.PublicKey()
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	must(err)
	akp, err := nkeys.CreateAccount()
	must(err)
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	must(err)
	// JetStream needs a system account.
	skp, err := nkeys.CreateAccount()
	must(err)
	spub, _ := skp.PublicKey()
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	must(err)
	ukp, err := nkeys.CreateUser()
	must(err)
	upub, _ := ukp.PublicKey()
	useed, _ := ukp.Seed()
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	must(err)
	file, err := jwt.FormatUserConfig(ujwt, useed)
	must(err)
	creds = writeFile(t, dir, "user.creds", string(file))
	conf = writeFile(t, dir, "operator.conf", jsConf+fmt.Sprintf("operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: { %s: %s, %s: %s }\n",
		ojwt, spub, apub, ajwt, spub, sjwt))
	return creds, conf
}

// Redis credentials: a password (requirepass) or an ACL user in the URL;
// wrong ones fail with a hint and never show the password, raw or
// URL-escaped.
func TestRedisCredentials(t *testing.T) {
	clearConnEnv(t)
	n := testenv.StartNATS(t)
	nats := []string{"--nats", n.URL}

	t.Run("requirepass", func(t *testing.T) {
		const pw = "redis-s3cret-pass"
		sock := startRedisProc(t, "--requirepass", pw)
		mustConnect(t, append(nats, "--redis", "unix://:"+pw+"@"+sock)...)
		secrets := []string{pw, "not-the-password"}
		mustRefuse(t, 1, []string{"WRONGPASS", "check the user and password"}, secrets,
			append(nats, "--redis", "unix://:not-the-password@"+sock)...)
		mustRefuse(t, 1, []string{"NOAUTH", "check the user and password"}, secrets, append(nats, "--redis", "unix://"+sock)...)
	})

	t.Run("ACL user", func(t *testing.T) {
		const pw = "p@ss/w:rd%&sp ace"
		// Only the store's keys, no admin commands, no default user.
		sock := startRedisProc(t, "--user", "durable", "on", ">"+pw, "~durable:*", "+@all", "-@dangerous", "--user", "default", "off")
		esc := url.PathEscape(pw)
		esc = strings.ReplaceAll(esc, ":", "%3A")
		esc = strings.ReplaceAll(esc, "@", "%40")
		mustConnect(t, append(nats, "--redis", "unix://durable:"+esc+"@"+sock)...)
		t.Run("from env", func(t *testing.T) {
			t.Setenv("DURABLE_REDIS_URL", "unix://durable:"+esc+"@"+sock)
			mustConnect(t, nats...)
		})
		secrets := []string{pw, esc, "wrong-pass-456"}
		mustRefuse(t, 1, []string{"WRONGPASS"}, secrets, append(nats, "--redis", "unix://durable:wrong-pass-456@"+sock)...)
		mustRefuse(t, 1, []string{"WRONGPASS"}, secrets, append(nats, "--redis", "unix://nobody:"+esc+"@"+sock)...)
		// A URL that does not parse: url.Parse quotes all of it.
		mustRefuse(t, 2, []string{"redis URL redis://***@127.0.0.1:port"}, secrets, append(nats, "--redis", "redis://durable:"+esc+"@127.0.0.1:port")...)
		mustRefuse(t, 2, []string{"redis URL"}, secrets, append(nats, "--redis", "redis://durable:"+pw+"@127.0.0.1:6379")...)
		mustRefuse(t, 2, []string{"redis URL"}, secrets, append(nats, "--redis", "redis://durable:wrong-pass-456/x@127.0.0.1:6379")...)
	})
}

// Redis over TLS (rediss://) with a private CA, and with client
// certificates when the server asks for them. Debian's redis-server is
// built with TLS.
func TestRedisTLS(t *testing.T) {
	clearConnEnv(t)
	n := testenv.StartNATS(t)
	p := newPKI(t)
	const pw = "redis-tls-pass-789"
	start := func(authClients string) string {
		port := freePort(t)
		startRedisProc(t, "--tls-port", fmt.Sprint(port), "--tls-cert-file", p.ServerCert, "--tls-key-file", p.ServerKey,
			"--tls-ca-cert-file", p.CA, "--tls-auth-clients", authClients, "--requirepass", pw)
		return fmt.Sprintf("127.0.0.1:%d", port)
	}
	secrets := []string{pw}

	t.Run("server certificate", func(t *testing.T) {
		addr := start("no")
		u := "rediss://:" + pw + "@" + addr
		mustConnect(t, "--nats", n.URL, "--redis", u, "--redis-tls-ca", p.CA)
		t.Run("from env", func(t *testing.T) {
			t.Setenv("DURABLE_REDIS_TLS_CA", p.CA)
			mustConnect(t, "--nats", n.URL, "--redis", u)
		})
		mustRefuse(t, 1, []string{"certificate", "--redis-tls-ca"}, secrets, "--nats", n.URL, "--redis", u)
		mustRefuse(t, 1, []string{"certificate"}, secrets, "--nats", n.URL, "--redis", u, "--redis-tls-ca", p.OtherCA)
		mustRefuse(t, 2, []string{"need a rediss:// URL"}, secrets, "--nats", n.URL, "--redis", "redis://:"+pw+"@"+addr, "--redis-tls-ca", p.CA)
	})

	t.Run("client certificate", func(t *testing.T) {
		addr := start("yes")
		u := "rediss://:" + pw + "@" + addr
		mustConnect(t, "--nats", n.URL, "--redis", u, "--redis-tls-ca", p.CA, "--redis-tls-cert", p.ClientCert, "--redis-tls-key", p.ClientKey)
		mustRefuse(t, 1, []string{"--redis-tls-cert and --redis-tls-key"}, secrets, "--nats", n.URL, "--redis", u, "--redis-tls-ca", p.CA)
	})
}
