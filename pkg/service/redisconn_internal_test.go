package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// --redis: one server, or a Redis Cluster with a +cluster scheme, parsed
// by go-redis (ParseURL, ParseClusterURL).
func TestRedisClientForms(t *testing.T) {
	for _, tc := range []struct {
		url      string
		cluster  bool
		addrs    []string // cluster seeds
		user, pw string
		tls      bool
	}{
		{url: "redis://127.0.0.1:6379/0"},
		{url: "unix:///run/redis.sock"},
		{url: "rediss://:pw@redis:6380", pw: "pw", tls: true},
		{url: "redis+cluster://127.0.0.1:7000", cluster: true, addrs: []string{"127.0.0.1:7000"}},
		{url: "redis+cluster://r1:7000?addr=r2:7001&addr=r3:7002", cluster: true, addrs: []string{"r1:7000", "r2:7001", "r3:7002"}},
		{url: "redis+cluster://durable:s3cret@r1:7000/?addr=r2:7001", cluster: true, addrs: []string{"r1:7000", "r2:7001"}, user: "durable", pw: "s3cret"},
		{url: "redis+cluster://r1:7000/0?addr=r2:7001&dial_timeout=2s", cluster: true, addrs: []string{"r1:7000", "r2:7001"}},
		{url: "rediss+cluster://:p%40ss@r1:7000?addr=r2:7001", cluster: true, addrs: []string{"r1:7000", "r2:7001"}, pw: "p@ss", tls: true},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c := Conn{RedisURL: tc.url}
			rdb, err := c.redisClient()
			if err != nil {
				t.Fatalf("redisClient: %v", err)
			}
			defer rdb.Close()
			switch cl := rdb.(type) {
			case *redis.ClusterClient:
				if !tc.cluster {
					t.Fatal("got a cluster client for a single server")
				}
				o := cl.Options()
				if !reflect.DeepEqual(o.Addrs, tc.addrs) || o.Username != tc.user || o.Password != tc.pw || (o.TLSConfig != nil) != tc.tls {
					t.Errorf("cluster options: addrs %v user %q password %q tls %v", o.Addrs, o.Username, o.Password, o.TLSConfig != nil)
				}
			case *redis.Client:
				if tc.cluster {
					t.Fatal("got a single-server client for a cluster URL")
				}
				if o := cl.Options(); o.Password != tc.pw || (o.TLSConfig != nil) != tc.tls {
					t.Errorf("options: password %q tls %v", o.Password, o.TLSConfig != nil)
				}
			default:
				t.Fatalf("client %T", rdb)
			}
		})
	}
}

// Bad URLs are usage errors that say what is wrong and what is wanted,
// and never show the password.
func TestRedisClientRefusals(t *testing.T) {
	const secret = "s3cret-Pw"
	for _, tc := range []struct {
		url  string
		says []string
	}{
		{"redis+cluster://u:" + secret + "@r1:7000/3?addr=r2:7001", []string{"database 0 only", "redis+cluster://***@r1:7000/3"}},
		{"redis+cluster://u:" + secret + "@r1:7000?addr=r2", []string{"addr", "r2", "redis+cluster://[user:password@]host1:port?addr=host2:port"}},
		{"redis+cluster://u:" + secret + "@r1:7000?addr=r2:7001&pool=3", []string{"unexpected option: pool"}},
		{"redis+cluster://u:" + secret + "@r1:7000?password=" + secret, []string{"unexpected option: password"}},
		{"redis+cluster://u:" + secret + "@r1:port", []string{"redis URL redis+cluster://***@r1:port", "port"}},
		{"redis+cluster://u:" + secret + "/x@r1:7000", []string{"redis URL"}},
		{"unix+cluster://u:" + secret + "@/run/redis.sock", []string{"unknown scheme unix+cluster", "redis+cluster://"}},
		{"redis+cluster://u:" + secret + "@/run/redis.sock", []string{"name a node of the cluster as host:port"}},
		{"redis://u:" + secret + "@r1:7000?addr=r2:7001", []string{"addr parameters name the other nodes of a Redis Cluster", "redis+cluster://"}},
		{"rediss://u:" + secret + "@r1:7000?addr=r2:7001", []string{"rediss+cluster://"}},
		{"http://u:" + secret + "@r1:7000", []string{"redis URL http://***@r1:7000", "invalid URL scheme"}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c := Conn{RedisURL: tc.url}
			rdb, err := c.redisClient()
			if err == nil {
				rdb.Close()
				t.Fatal("accepted")
			}
			var u UsageError
			if !errors.As(err, &u) {
				t.Errorf("%v: not a usage error", err)
			}
			msg := err.Error()
			t.Log(msg)
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("error does not say %q: %s", s, msg)
				}
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error shows the password: %s", msg)
			}
		})
	}
}

func TestRedactClusterURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis+cluster://u:pw@r1:7000?addr=r2:7001", "redis+cluster://***@r1:7000?addr=r2:7001"},
		{"rediss+cluster://:pw@r1:7000", "rediss+cluster://***@r1:7000"},
		{"redis+cluster://r1:7000?addr=r2:7001&password=pw&x=1", "redis+cluster://r1:7000?addr=r2:7001&password=***&x=1"},
		{"redis://h:1?Auth_Token=t", "redis://h:1?Auth_Token=***"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// --replicas and DURABLE_REPLICAS: 1 to 5, default 1; the TLS flags take a
// rediss+cluster:// URL.
func TestSettleReplicasAndClusterTLS(t *testing.T) {
	parse := func(args ...string) (Conn, error) {
		var c Conn
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.Register(fs)
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, c.Settle()
	}
	for _, k := range []string{"DURABLE_REPLICAS", "DURABLE_REDIS_URL", "DURABLE_NATS_URL"} {
		t.Setenv(k, "")
	}
	for _, tc := range []struct {
		env  string
		args []string
		want int
	}{
		{"", nil, 1},
		{"", []string{"--replicas", "3"}, 3},
		{"5", nil, 5},
		{"3", []string{"--replicas", "1"}, 1},
	} {
		t.Setenv("DURABLE_REPLICAS", tc.env)
		c, err := parse(tc.args...)
		if err != nil || c.Replicas != tc.want {
			t.Errorf("env %q args %q: replicas %d, err %v; want %d", tc.env, tc.args, c.Replicas, err, tc.want)
		}
	}
	t.Setenv("DURABLE_REPLICAS", "")
	for _, bad := range []string{"0", "6", "-1", "three", "3.0"} {
		_, err := parse("--replicas", bad)
		var u UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), "DURABLE_REPLICAS") || !strings.Contains(err.Error(), "1 to 5") {
			t.Errorf("--replicas %s: %v, want a usage error naming DURABLE_REPLICAS and the range", bad, err)
		}
	}
	t.Setenv("DURABLE_REPLICAS", "9")
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), `"9"`) {
		t.Errorf("DURABLE_REPLICAS=9: %v", err)
	}
	t.Setenv("DURABLE_REPLICAS", "")

	dir := t.TempDir()
	ca := dir + "/ca.pem"
	if err := writeTestFile(ca, "not used"); err != nil {
		t.Fatal(err)
	}
	if _, err := parse("--redis", "rediss+cluster://r1:7000", "--redis-tls-ca", ca); err != nil {
		t.Errorf("rediss+cluster:// with --redis-tls-ca: %v", err)
	}
	if _, err := parse("--redis", "redis+cluster://r1:7000", "--redis-tls-ca", ca); err == nil || !strings.Contains(err.Error(), "rediss+cluster://") {
		t.Errorf("redis+cluster:// with --redis-tls-ca: %v, want a refusal naming rediss+cluster://", err)
	}
}

func writeTestFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// A TLS server that verifies clients closes a session without a client
// certificate; the client sees the alert, or a reset when it wrote first.
// Both get the hint, the reset only when no client certificate was given.
func TestRedisHintForAClosedTLSSession(t *testing.T) {
	const want = "--redis-tls-cert and --redis-tls-key"
	reset := fmt.Errorf("ping: %w", &net.OpError{Op: "write", Net: "tcp", Err: &os.SyscallError{Syscall: "write", Err: syscall.ECONNRESET}})
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	for _, tc := range []struct {
		err          error
		noClientCert bool
		hinted       bool
	}{
		{alert, true, true},
		{alert, false, true},
		{reset, true, true},
		{io.EOF, true, true},
		{reset, false, false}, // a client certificate was given: not the cause
		{errors.New("dial tcp: connection refused"), true, false},
	} {
		if got := strings.Contains(redisHint(tc.err, tc.noClientCert), want); got != tc.hinted {
			t.Errorf("redisHint(%v, noClientCert=%t) = %q; want the client certificate hint: %t", tc.err, tc.noClientCert, redisHint(tc.err, tc.noClientCert), tc.hinted)
		}
	}
}
