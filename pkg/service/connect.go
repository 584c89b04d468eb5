package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/queue"
)

// Conn holds the connection settings every durable process shares: the
// NATS servers, the checkpoint store (Redis, or JetStream KV when no Redis
// URL is given), credentials, TLS and the replicas of what it creates.
// Commands take them from flags, then from DURABLE_* variables (Register);
// a program that starts its own servers sets the URLs directly and reads
// nothing from the environment.
//
// Secrets (passwords, URLs with user info) are never printed: not in logs,
// errors or the flags' help, whose defaults are left empty for that reason.
type Conn struct {
	// NATSURL is the NATS server URL, or several comma-separated.
	// Default nats://127.0.0.1:4222.
	NATSURL string
	// RedisURL is the checkpoint store's Redis (redis://, rediss://,
	// unix://, redis+cluster://). Empty: the JetStream KV store.
	RedisURL string
	// KVBucket is the JetStream KV bucket of the store when RedisURL is
	// empty. Default "durable".
	KVBucket string

	natsCreds    string // credentials file: user JWT and nkey seed
	natsNkey     string // nkey seed file
	natsUser     string
	natsPassword string
	natsTLS      tlsFiles
	// natsInbox is the prefix of this process's reply subjects; deploy/nats
	// gives each user its own so that no user reads another's replies.
	natsInbox string
	redisTLS  tlsFiles

	// Replicas of the streams and buckets this process creates when they
	// are missing. Settle sets it from --replicas (DURABLE_REPLICAS);
	// default 1.
	Replicas    int
	replicasArg string

	// fromEnv are the flags that fall back to env when not given.
	fromEnv []*envFlag
}

// tlsFiles are PEM files: the CA that signed the server's certificate and
// the client's certificate and key, for servers that verify clients.
type tlsFiles struct{ ca, cert, key string }

func (t tlsFiles) any() bool { return t.ca != "" || t.cert != "" || t.key != "" }

const defaultBucket = "durable"

// Register adds the connection flags to fs: --nats, --redis, --kv-bucket,
// --replicas and the credentials and TLS flags, each falling back to its
// DURABLE_* variable when not given (Settle, which Open calls, reads
// them). fs keeps pointers into c: do not copy c after Register.
func (c *Conn) Register(fs *flag.FlagSet) {
	c.flag(fs, &c.NATSURL, "nats", "DURABLE_NATS_URL", nats.DefaultURL,
		"NATS server `URL`, or several comma-separated; nats://user:password@host:port is accepted, tls:// asks for TLS")
	c.flag(fs, &c.natsCreds, "nats-creds", "DURABLE_NATS_CREDS", "", "NATS credentials `file` (user JWT and nkey seed, from nsc)")
	c.flag(fs, &c.natsNkey, "nats-nkey", "DURABLE_NATS_NKEY", "", "NATS nkey seed `file` (nk -gen user)")
	c.flag(fs, &c.natsUser, "nats-user", "DURABLE_NATS_USER", "", "NATS `user` (with --nats-password)")
	c.flag(fs, &c.natsPassword, "nats-password", "DURABLE_NATS_PASSWORD", "", "NATS `password`; prefer the env var: a flag shows in the process list")
	c.flag(fs, &c.natsTLS.ca, "nats-tls-ca", "DURABLE_NATS_TLS_CA", "", "PEM `file` of the CA that signed the NATS server's certificate (implies TLS)")
	c.flag(fs, &c.natsTLS.cert, "nats-tls-cert", "DURABLE_NATS_TLS_CERT", "", "PEM client certificate `file`, for a NATS server that verifies clients")
	c.flag(fs, &c.natsTLS.key, "nats-tls-key", "DURABLE_NATS_TLS_KEY", "", "PEM client key `file` of --nats-tls-cert")
	c.flag(fs, &c.natsInbox, "nats-inbox-prefix", "DURABLE_NATS_INBOX_PREFIX", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
		"subject `prefix` of this process's replies, one its NATS user may subscribe to (deploy/nats: _INBOX_<user>)")
	c.flag(fs, &c.RedisURL, "redis", "DURABLE_REDIS_URL", "",
		"Redis `URL` of the checkpoint store: redis://[user:password@]host:port[/db], rediss:// for TLS, unix:///path; "+
			"a Redis Cluster as redis+cluster://[user:password@]host1:port?addr=host2:port&addr=host3:port (rediss+cluster:// for TLS); empty uses JetStream KV")
	c.flag(fs, &c.redisTLS.ca, "redis-tls-ca", "DURABLE_REDIS_TLS_CA", "", "PEM `file` of the CA that signed the Redis server's certificate (rediss:// URLs)")
	c.flag(fs, &c.redisTLS.cert, "redis-tls-cert", "DURABLE_REDIS_TLS_CERT", "", "PEM client certificate `file`, for a Redis with tls-auth-clients")
	c.flag(fs, &c.redisTLS.key, "redis-tls-key", "DURABLE_REDIS_TLS_KEY", "", "PEM client key `file` of --redis-tls-cert")
	c.flag(fs, &c.KVBucket, "kv-bucket", "DURABLE_KV_BUCKET", defaultBucket, "JetStream KV `bucket` of the checkpoint store when no Redis URL is given")
	c.flag(fs, &c.replicasArg, "replicas", "DURABLE_REPLICAS", "1",
		"`replicas` of the JetStream streams and buckets this process creates when they are missing: 1 on one server, 3 (or 5) on a NATS cluster; existing ones keep theirs")
}

// flag registers a string flag that falls back to env when not given. def
// is only shown: Settle applies the defaults.
func (c *Conn) flag(fs *flag.FlagSet, dst *string, name, env, def, help string) {
	f := &envFlag{dst: dst, env: env}
	c.fromEnv = append(c.fromEnv, f)
	if def != "" {
		help += " (env " + env + ", default " + def + ")"
	} else {
		help += " (env " + env + ")"
	}
	fs.Var(f, name, help)
}

// envFlag is a string flag without a printed default: the value may come
// from env and be a secret, and `-h` must not show it.
type envFlag struct {
	dst *string
	env string
	set bool
}

func (f *envFlag) String() string { return "" }

func (f *envFlag) Set(v string) error {
	*f.dst, f.set = v, true
	return nil
}

// Settle fills what the command line left out from env and defaults, then
// checks that the settings fit together. Errors are usage errors.
func (c *Conn) Settle() (err error) {
	for _, f := range c.fromEnv {
		if !f.set {
			if v := os.Getenv(f.env); v != "" {
				*f.dst = v
			}
		}
	}
	if c.NATSURL == "" {
		c.NATSURL = nats.DefaultURL
	}
	if c.KVBucket == "" {
		c.KVBucket = defaultBucket
	}
	var auth []string
	if hasUserInfo(c.NATSURL) {
		auth = append(auth, "user info in --nats URL")
	}
	if c.natsCreds != "" {
		auth = append(auth, "--nats-creds")
	}
	if c.natsNkey != "" {
		auth = append(auth, "--nats-nkey")
	}
	if c.natsUser != "" || c.natsPassword != "" {
		auth = append(auth, "--nats-user/--nats-password")
	}
	if len(auth) > 1 {
		return Usagef("NATS credentials: give one of %s, not several", strings.Join(auth, ", "))
	}
	if (c.natsUser == "") != (c.natsPassword == "") {
		return Usagef("NATS credentials: --nats-user and --nats-password (env DURABLE_NATS_USER, DURABLE_NATS_PASSWORD) go together")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", c.natsCreds}, {"--nats-nkey", c.natsNkey},
		{"--nats-tls-ca", c.natsTLS.ca}, {"--nats-tls-cert", c.natsTLS.cert}, {"--nats-tls-key", c.natsTLS.key},
		{"--redis-tls-ca", c.redisTLS.ca}, {"--redis-tls-cert", c.redisTLS.cert}, {"--redis-tls-key", c.redisTLS.key},
	} {
		if err := readable(f.flag, f.path); err != nil {
			return err
		}
	}
	if (c.natsTLS.cert == "") != (c.natsTLS.key == "") {
		return Usagef("NATS TLS: --nats-tls-cert and --nats-tls-key go together")
	}
	if (c.redisTLS.cert == "") != (c.redisTLS.key == "") {
		return Usagef("Redis TLS: --redis-tls-cert and --redis-tls-key go together")
	}
	if c.redisTLS.any() && !strings.HasPrefix(c.RedisURL, "rediss://") && !strings.HasPrefix(c.RedisURL, "rediss+cluster://") {
		return Usagef("Redis TLS: --redis-tls-ca, --redis-tls-cert and --redis-tls-key need a rediss:// URL, or rediss+cluster:// for a Redis Cluster (--redis, env DURABLE_REDIS_URL)")
	}
	arg := c.replicasArg
	if arg == "" && c.Replicas != 0 {
		arg = strconv.Itoa(c.Replicas) // set by the program, not by a flag
	}
	if c.Replicas, err = parseReplicas(arg); err != nil {
		return err
	}
	if p := c.natsInbox; p != "" && (strings.ContainsAny(p, "*> \t") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".")) {
		return Usagef("--nats-inbox-prefix %q: want subject tokens without wildcards or a trailing dot, e.g. _INBOX_worker", p)
	}
	return nil
}

// readable checks a file named by a flag, so that a typo is a usage error
// now rather than a connection that never comes up.
func readable(flagName, path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Usagef("%s %s: no such file", flagName, path)
		}
		return Usagef("%s %s: %v", flagName, path, errors.Unwrap(err))
	}
	_ = f.Close()
	return nil
}

// Session is an open connection to NATS and the checkpoint store.
type Session struct {
	NATS      *nats.Conn
	JetStream jetstream.JetStream
	Store     checkpoint.Store
	// Redis is the store's client; nil on the JetStream KV store.
	Redis redis.UniversalClient
	// closed is closed by the connection's last callback.
	closed <-chan struct{}
}

// Close closes the connections and waits for NATS's callbacks to finish.
func (s *Session) Close() {
	if s.Redis != nil {
		_ = s.Redis.Close()
	}
	if s.NATS != nil {
		closeNATS(s.NATS, s.closed)
	}
}

// closeNATS closes nc and waits for its callbacks to finish: they log, and
// must not write to the command's output after it returned. nats.go runs
// them one at a time, the closed handler last.
func closeNATS(nc *nats.Conn, closed <-chan struct{}) {
	nc.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
	}
}

// Open connects to NATS and the store, retrying NATS briefly so that a
// fleet can start in any order. Refused credentials and untrusted
// certificates fail at once: retrying does not fix them.
func (c *Conn) Open(ctx context.Context, name string, log zerolog.Logger) (*Session, error) {
	if err := c.Settle(); err != nil {
		return nil, err
	}
	opts, err := c.natsOptions(name, log)
	if err != nil {
		return nil, err
	}
	var attempt lastError
	closed := make(chan struct{})
	opts = append(opts,
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			attempt.set(err)
			log.Debug().Err(err).Msg("nats connect attempt failed")
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	)
	where := RedactURL(c.NATSURL)
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		// Retrying on failed connects, Connect fails only on its settings
		// (a URL that does not parse, unreadable TLS files).
		return nil, Usagef("connect to NATS at %s: %s", where, c.scrub(err))
	}
	if err := waitConnected(ctx, nc, 10*time.Second, &attempt); err != nil {
		closeNATS(nc, closed)
		return nil, fmt.Errorf("connect to NATS at %s: %w", where, c.scrubbed(err))
	}
	if err := checkInbox(nc); err != nil {
		closeNATS(nc, closed)
		return nil, err
	}
	_, tlsErr := nc.TLSConnectionState()
	log.Info().Str("url", nc.ConnectedUrlRedacted()).Str("auth", c.natsAuthKind()).Bool("tls", tlsErr == nil).Msg("connected to NATS")
	s := &Session{NATS: nc, closed: closed}
	// Async publishes (queue.PublishAll) wait at most queue.PublishTimeout
	// for their PubAcks; the same timeout here lets nats.go forget one that
	// never comes, instead of keeping it until the connection closes.
	if s.JetStream, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(queue.PublishTimeout)); err != nil {
		s.Close()
		return nil, err
	}
	if c.RedisURL != "" {
		if s.Redis, err = c.redisClient(); err != nil {
			s.Close()
			return nil, err
		}
		if err := c.checkRedis(ctx, s.Redis); err != nil {
			s.Close()
			return nil, err
		}
		ev := log.Info().Str("url", RedactURL(c.RedisURL))
		if cc, ok := s.Redis.(*redis.ClusterClient); ok {
			ev = ev.Bool("cluster", true).Int("seeds", len(cc.Options().Addrs))
		}
		ev.Msg("connected to Redis")
		s.Store = redisstore.New(s.Redis, redisstore.Options{})
		return s, nil
	}
	st, err := kvstore.New(ctx, s.JetStream, kvstore.Options{Bucket: c.KVBucket, Replicas: c.Replicas})
	if err != nil {
		why := denied(nc)
		s.Close()
		return nil, c.ReplicasError(fmt.Errorf("open JetStream KV store: %w%s", err, why))
	}
	s.Store = st
	return s, nil
}

func (c *Conn) natsOptions(name string, log zerolog.Logger) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A refused subscription then fails its NextMsg instead of waiting.
		nats.PermissionErrOnSubscribe(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected") }),
		// Permission violations arrive here: the server names the subject
		// (never a credential), which is what an operator needs to fix it.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subscription", sub.Subject)
			}
			ev.Msg("nats error")
		}),
	}
	switch {
	case c.natsCreds != "":
		opts = append(opts, nats.UserCredentials(c.natsCreds))
	case c.natsNkey != "":
		o, err := nats.NkeyOptionFromSeed(c.natsNkey)
		if err != nil {
			return nil, Usagef("--nats-nkey %s: %v (want a user seed file, as `nk -gen user` writes)", c.natsNkey, err)
		}
		opts = append(opts, o)
	case c.natsUser != "":
		opts = append(opts, nats.UserInfo(c.natsUser, c.natsPassword))
	}
	if c.natsTLS.ca != "" {
		opts = append(opts, nats.RootCAs(c.natsTLS.ca))
	}
	if c.natsTLS.cert != "" {
		opts = append(opts, nats.ClientCert(c.natsTLS.cert, c.natsTLS.key))
	}
	if c.natsInbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.natsInbox))
	}
	return opts, nil
}

func (c *Conn) natsAuthKind() string {
	switch {
	case c.natsCreds != "":
		return "creds"
	case c.natsNkey != "":
		return "nkey"
	case c.natsUser != "":
		return "user " + c.natsUser
	case hasUserInfo(c.NATSURL):
		return "url"
	}
	return "none"
}

// scrub removes the secrets of c from an error message, in case a library
// quoted them: url.Parse quotes the whole URL, or the piece of the user
// info it could not parse ("invalid port", a bad %-escape).
func (c *Conn) scrub(err error) string {
	msg := err.Error()
	var infos []string
	for _, u := range []string{c.NATSURL, c.RedisURL} {
		infos = append(infos, userInfos(u)...)
	}
	msg = quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		inner := q[1 : len(q)-1]
		for _, info := range infos {
			switch {
			case strings.Contains(inner, info):
				return `"` + RedactURL(inner) + `"`
			case inner != "" && strings.Contains(info, inner):
				return `"***"`
			}
		}
		return q
	})
	for _, s := range append(infos, c.natsPassword) {
		if len(s) < 3 {
			continue // too short to be worth replacing; it would garble the text
		}
		msg = strings.ReplaceAll(msg, s, "***")
		if e := url.QueryEscape(s); e != s {
			msg = strings.ReplaceAll(msg, e, "***")
		}
	}
	return msg
}

var quotedRE = regexp.MustCompile(`"[^"]*"`)

// scrubbed is err with the secrets of c removed from its message; errors.Is
// and errors.As still see err.
func (c *Conn) scrubbed(err error) error { return scrubbedError{msg: c.scrub(err), err: err} }

type scrubbedError struct {
	msg string
	err error
}

func (e scrubbedError) Error() string { return e.msg }
func (e scrubbedError) Unwrap() error { return e.err }

// lastError remembers the latest failed connection attempt.
type lastError struct {
	mu  sync.Mutex
	err error
}

func (l *lastError) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *lastError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func waitConnected(ctx context.Context, nc *nats.Conn, timeout time.Duration, attempt *lastError) error {
	deadline := time.Now().Add(timeout)
	for !nc.IsConnected() {
		last := attempt.get()
		if nc.IsClosed() && nc.LastError() != nil {
			last = nc.LastError()
		}
		if hint := natsHint(last); hint != "" {
			return fmt.Errorf("%w (%s)", last, hint)
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("not connected after %s: %w (is nats-server -js running? `durable dev` starts one)", timeout, last)
			}
			return errors.New("not connected after " + timeout.String() + " (is nats-server -js running? `durable dev` starts one)")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// natsHint says what to do about an error that retrying will not fix, ""
// for the others.
func natsHint(err error) string {
	var op *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return "the server refused the credentials: check --nats-user/--nats-password, --nats-creds or --nats-nkey"
	case isCertError(err):
		return "the server's certificate is not trusted: pass its CA with --nats-tls-ca"
	case errors.Is(err, nats.ErrTLS), errors.As(err, &op) && op.Op == "remote error":
		// The server hangs up, or sends an alert, after the handshake when
		// it wants a client certificate and got none (or one it does not
		// trust).
		return "the server refused the TLS session: if it verifies clients, pass --nats-tls-cert and --nats-tls-key with a certificate its CA signed"
	}
	return ""
}

func isCertError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify)
}

// checkInbox subscribes to a reply subject of this connection: a user
// that may not subscribe there would see every request time out.
func checkInbox(nc *nats.Conn) error {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return nil // not a permission matter; the next call reports it
	}
	if _, err := sub.NextMsg(time.Millisecond); errors.Is(err, nats.ErrPermissionViolation) {
		prefix := inbox[:strings.LastIndex(inbox, ".")]
		return fmt.Errorf("NATS does not let this user subscribe to its replies (%s.>): %w; set --nats-inbox-prefix (env DURABLE_NATS_INBOX_PREFIX) to the prefix the user may subscribe to (deploy/nats/nats-server.conf: _INBOX_<user>)", prefix, err)
	}
	return nil
}

// denied names the latest subject NATS refused this connection, to explain
// a request that timed out because the server dropped it.
func denied(nc *nats.Conn) string {
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return fmt.Sprintf(" (%v: the NATS user lacks that permission; see deploy/nats/README.md)", err)
	}
	return ""
}

// RedactURL hides the user info (user, password or token) of every URL in
// a comma-separated list, for logs and errors.
func RedactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		scheme, rest := splitScheme(p)
		// The last '@' ends the user info even when the password holds an
		// unescaped '@'; hiding too much is the safe side.
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = "***" + rest[at:]
		}
		parts[i] = scheme + redactQuery(rest)
	}
	return strings.Join(parts, ",")
}

// redactQuery hides the values of query parameters whose names suggest a
// secret: no URL of ours takes one there (a password belongs in the user
// info), but a mistaken one must not end up in a log.
func redactQuery(s string) string {
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		name, _, hasValue := strings.Cut(p, "=")
		lower := strings.ToLower(name)
		if hasValue && secretParam(lower) {
			params[i] = name + "=***"
		}
	}
	return base + "?" + strings.Join(params, "&")
}

func secretParam(name string) bool {
	for _, s := range []string{"pass", "pwd", "secret", "token", "auth", "cred", "key"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// userInfos returns the user info of every URL in a comma-separated list,
// raw and unescaped, and its password alone.
func userInfos(u string) []string {
	var out []string
	for _, p := range strings.Split(u, ",") {
		_, rest := splitScheme(p)
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		info := rest[:at]
		out = append(out, info)
		if _, pw, ok := strings.Cut(info, ":"); ok {
			out = append(out, pw)
			if un, err := url.PathUnescape(pw); err == nil {
				out = append(out, un)
			}
		}
	}
	return out
}

func hasUserInfo(u string) bool { return len(userInfos(u)) > 0 }

func splitScheme(u string) (scheme, rest string) {
	if j := strings.Index(u, "://"); j >= 0 {
		return u[:j+3], u[j+3:]
	}
	return "", u
}
