package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
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
)

// conn holds the connection settings every command shares. Commands take
// them from flags, then env (register); `durable dev` and the demo set the
// URLs of their embedded servers directly and read nothing from env.
//
// Secrets (passwords, URLs with user info) are never printed: not in logs,
// errors or the flags' help, whose defaults are left empty for that reason.
type conn struct {
	natsURL  string
	redisURL string
	bucket   string

	natsCreds    string // credentials file: user JWT and nkey seed
	natsNkey     string // nkey seed file
	natsUser     string
	natsPassword string
	natsTLS      tlsFiles
	// natsInbox is the prefix of this process's reply subjects; deploy/nats
	// gives each user its own so that no user reads another's replies.
	natsInbox string
	redisTLS  tlsFiles

	// replicas of the streams and buckets this process creates when they
	// are missing (settle parses replicasArg; 1 when not given).
	replicas    int
	replicasArg string

	// fromEnv are the flags that fall back to env when not given.
	fromEnv []*envFlag
}

// tlsFiles are PEM files: the CA that signed the server's certificate and
// the client's certificate and key, for servers that verify clients.
type tlsFiles struct{ ca, cert, key string }

func (t tlsFiles) any() bool { return t.ca != "" || t.cert != "" || t.key != "" }

const defaultBucket = "durable"

func (c *conn) register(fs *flag.FlagSet) {
	c.flag(fs, &c.natsURL, "nats", "DURABLE_NATS_URL", nats.DefaultURL,
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
	c.flag(fs, &c.redisURL, "redis", "DURABLE_REDIS_URL", "",
		"Redis `URL` of the checkpoint store: redis://[user:password@]host:port[/db], rediss:// for TLS, unix:///path; "+
			"a Redis Cluster as redis+cluster://[user:password@]host1:port?addr=host2:port&addr=host3:port (rediss+cluster:// for TLS); empty uses JetStream KV")
	c.flag(fs, &c.redisTLS.ca, "redis-tls-ca", "DURABLE_REDIS_TLS_CA", "", "PEM `file` of the CA that signed the Redis server's certificate (rediss:// URLs)")
	c.flag(fs, &c.redisTLS.cert, "redis-tls-cert", "DURABLE_REDIS_TLS_CERT", "", "PEM client certificate `file`, for a Redis with tls-auth-clients")
	c.flag(fs, &c.redisTLS.key, "redis-tls-key", "DURABLE_REDIS_TLS_KEY", "", "PEM client key `file` of --redis-tls-cert")
	c.flag(fs, &c.bucket, "kv-bucket", "DURABLE_KV_BUCKET", defaultBucket, "JetStream KV `bucket` of the checkpoint store when no Redis URL is given")
	c.flag(fs, &c.replicasArg, "replicas", "DURABLE_REPLICAS", "1",
		"`replicas` of the JetStream streams and buckets this process creates when they are missing: 1 on one server, 3 (or 5) on a NATS cluster; existing ones keep theirs")
}

// flag registers a string flag that falls back to env when not given. def
// is only shown: settle applies the defaults.
func (c *conn) flag(fs *flag.FlagSet, dst *string, name, env, def, help string) {
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

// settle fills what the command line left out from env and defaults, then
// checks that the settings fit together. Errors are usage errors.
func (c *conn) settle() (err error) {
	for _, f := range c.fromEnv {
		if !f.set {
			if v := os.Getenv(f.env); v != "" {
				*f.dst = v
			}
		}
	}
	if c.natsURL == "" {
		c.natsURL = nats.DefaultURL
	}
	if c.bucket == "" {
		c.bucket = defaultBucket
	}
	var auth []string
	if hasUserInfo(c.natsURL) {
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
		return usagef("NATS credentials: give one of %s, not several", strings.Join(auth, ", "))
	}
	if (c.natsUser == "") != (c.natsPassword == "") {
		return usagef("NATS credentials: --nats-user and --nats-password (env DURABLE_NATS_USER, DURABLE_NATS_PASSWORD) go together")
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
		return usagef("NATS TLS: --nats-tls-cert and --nats-tls-key go together")
	}
	if (c.redisTLS.cert == "") != (c.redisTLS.key == "") {
		return usagef("Redis TLS: --redis-tls-cert and --redis-tls-key go together")
	}
	if c.redisTLS.any() && !strings.HasPrefix(c.redisURL, "rediss://") && !strings.HasPrefix(c.redisURL, "rediss+cluster://") {
		return usagef("Redis TLS: --redis-tls-ca, --redis-tls-cert and --redis-tls-key need a rediss:// URL, or rediss+cluster:// for a Redis Cluster (--redis, env DURABLE_REDIS_URL)")
	}
	if c.replicas, err = parseReplicas(c.replicasArg); err != nil {
		return err
	}
	if p := c.natsInbox; p != "" && (strings.ContainsAny(p, "*> \t") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".")) {
		return usagef("--nats-inbox-prefix %q: want subject tokens without wildcards or a trailing dot, e.g. _INBOX_worker", p)
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
			return usagef("%s %s: no such file", flagName, path)
		}
		return usagef("%s %s: %v", flagName, path, errors.Unwrap(err))
	}
	_ = f.Close()
	return nil
}

// session is an open connection to NATS and the store.
type session struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store checkpoint.Store
	rdb   redis.UniversalClient
	// closed is closed by the connection's last callback.
	closed <-chan struct{}
}

func (s *session) Close() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.nc != nil {
		closeNATS(s.nc, s.closed)
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

// open connects to NATS and the store, retrying NATS briefly so that a
// fleet can start in any order. Refused credentials and untrusted
// certificates fail at once: retrying does not fix them.
func (c *conn) open(ctx context.Context, name string, log zerolog.Logger) (*session, error) {
	if err := c.settle(); err != nil {
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
	where := redactURL(c.natsURL)
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		// Retrying on failed connects, Connect fails only on its settings
		// (a URL that does not parse, unreadable TLS files).
		return nil, usagef("connect to NATS at %s: %s", where, c.scrub(err))
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
	s := &session{nc: nc, closed: closed}
	if s.js, err = jetstream.New(nc); err != nil {
		s.Close()
		return nil, err
	}
	if c.redisURL != "" {
		if s.rdb, err = c.redisClient(); err != nil {
			s.Close()
			return nil, err
		}
		if err := c.checkRedis(ctx, s.rdb); err != nil {
			s.Close()
			return nil, err
		}
		ev := log.Info().Str("url", redactURL(c.redisURL))
		if cc, ok := s.rdb.(*redis.ClusterClient); ok {
			ev = ev.Bool("cluster", true).Int("seeds", len(cc.Options().Addrs))
		}
		ev.Msg("connected to Redis")
		s.store = redisstore.New(s.rdb, redisstore.Options{})
		return s, nil
	}
	st, err := kvstore.New(ctx, s.js, kvstore.Options{Bucket: c.bucket, Replicas: c.replicas})
	if err != nil {
		why := denied(nc)
		s.Close()
		return nil, c.replicasError(fmt.Errorf("open JetStream KV store: %w%s", err, why))
	}
	s.store = st
	return s, nil
}

func (c *conn) natsOptions(name string, log zerolog.Logger) ([]nats.Option, error) {
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
			return nil, usagef("--nats-nkey %s: %v (want a user seed file, as `nk -gen user` writes)", c.natsNkey, err)
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

func (c *conn) natsAuthKind() string {
	switch {
	case c.natsCreds != "":
		return "creds"
	case c.natsNkey != "":
		return "nkey"
	case c.natsUser != "":
		return "user " + c.natsUser
	case hasUserInfo(c.natsURL):
		return "url"
	}
	return "none"
}

// scrub removes the secrets of c from an error message, in case a library
// quoted them: url.Parse quotes the whole URL, or the piece of the user
// info it could not parse ("invalid port", a bad %-escape).
func (c *conn) scrub(err error) string {
	msg := err.Error()
	var infos []string
	for _, u := range []string{c.natsURL, c.redisURL} {
		infos = append(infos, userInfos(u)...)
	}
	msg = quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		inner := q[1 : len(q)-1]
		for _, info := range infos {
			switch {
			case strings.Contains(inner, info):
				return `"` + redactURL(inner) + `"`
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
func (c *conn) scrubbed(err error) error { return scrubbedError{msg: c.scrub(err), err: err} }

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

// redactURL hides the user info (user, password or token) of every URL in
// a comma-separated list, for logs and errors.
func redactURL(u string) string {
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

// newLogger returns a JSON logger at DURABLE_LOG_LEVEL (default info; an
// empty or unknown level never silences logging).
func newLogger(w io.Writer, component string) zerolog.Logger {
	level := zerolog.InfoLevel
	if v := os.Getenv("DURABLE_LOG_LEVEL"); v != "" {
		if l, err := zerolog.ParseLevel(v); err == nil && l != zerolog.NoLevel {
			level = l
		}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("component", component).Logger()
}

// parseArgs parses flags that may come before or after positional
// arguments (`durable runs show RUN --json`) and returns the positionals.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
