package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis Cluster is named by its scheme: redis+cluster:// (rediss+cluster://
// over TLS) with one seed node in the host and more in addr parameters, the
// form of go-redis's ParseClusterURL. A URL can't say it otherwise: one
// address may be a cluster's seed, and several could be a typo.
const clusterScheme = "+cluster"

// redisForms is what a --redis URL may look like, for errors.
const redisForms = "want redis://[user:password@]host:port[/db], rediss:// for TLS, unix:///path, " +
	"or for a Redis Cluster redis+cluster://[user:password@]host1:port?addr=host2:port&addr=host3:port (rediss+cluster:// for TLS); " +
	"escape special characters in the password"

// RedisClient returns the client the services build from a --redis URL
// (DURABLE_REDIS_URL): one server, or a Redis Cluster client for a
// redis+cluster:// URL that follows a failover at once. For tests and
// tools that must reach the store exactly as the fleet does.
func RedisClient(rawURL string) (redis.UniversalClient, error) {
	c := Conn{RedisURL: rawURL}
	return c.redisClient()
}

// redisClient builds the client --redis names: a single server or, with a
// +cluster scheme, a Redis Cluster client that follows MOVED and ASK
// redirections and retries TRYAGAIN and CLUSTERDOWN during a failover.
func (c *Conn) redisClient() (redis.UniversalClient, error) {
	scheme, rest := splitScheme(c.RedisURL)
	base, cluster := strings.CutSuffix(strings.TrimSuffix(scheme, "://"), clusterScheme)
	if !cluster {
		opt, err := c.redisSingleOptions()
		if err != nil {
			return nil, err
		}
		return redis.NewClient(opt), nil
	}
	if base != "redis" && base != "rediss" {
		return nil, Usagef("redis URL %s: unknown scheme %s; %s", RedactURL(c.RedisURL), strings.TrimSuffix(scheme, "://"), redisForms)
	}
	plain := base + "://" + rest
	opt, err := redis.ParseClusterURL(plain)
	if err != nil {
		return nil, c.redisURLError(err)
	}
	if u, err := url.Parse(plain); err == nil {
		if u.Host == "" {
			return nil, Usagef("redis URL %s: name a node of the cluster as host:port; %s", RedactURL(c.RedisURL), redisForms)
		}
		// ParseClusterURL ignores the path; a Cluster has database 0 only.
		if u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return nil, Usagef("redis URL %s: a Redis Cluster has database 0 only, not %s; drop the path", RedactURL(c.RedisURL), strings.TrimPrefix(u.Path, "/"))
		}
	}
	if err := c.redisTLSConfig(opt.TLSConfig); err != nil {
		return nil, err
	}
	// A fallback for followFailover: re-read the slot map at least this
	// often while commands flow (go-redis's default is a minute).
	opt.ClusterStateReloadInterval = 5 * time.Second
	cc := redis.NewClusterClient(opt)
	followFailover(cc)
	return cc, nil
}

// followFailover makes cc re-read the cluster's slot map as soon as a node
// can't be dialled. go-redis re-reads it on MOVED, ASK and READONLY
// replies only, and a primary that died never sends one: after its
// replica was promoted, the client went on dialling the dead address, and
// every run whose slot the dead primary held failed with "connection
// refused" until the periodic reload, a minute later (measured in the
// fleet test: the whole fleet stood still 12s after a failover that took
// 3s). ReloadState coalesces concurrent calls.
func followFailover(cc *redis.ClusterClient) {
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(reloadOnDialError{cc: cc}) })
}

type reloadOnDialError struct{ cc *redis.ClusterClient }

func (h reloadOnDialError) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.cc.ReloadState(ctx)
		}
		return conn, err
	}
}

func (reloadOnDialError) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (reloadOnDialError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *Conn) redisSingleOptions() (*redis.Options, error) {
	// ParseURL would say "unexpected option: addr": say what it means.
	if u, err := url.Parse(c.RedisURL); err == nil && u.Query().Has("addr") {
		return nil, Usagef("redis URL %s: addr parameters name the other nodes of a Redis Cluster: write the scheme %s+cluster://", RedactURL(c.RedisURL), u.Scheme)
	}
	opt, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, c.redisURLError(err)
	}
	if err := c.redisTLSConfig(opt.TLSConfig); err != nil {
		return nil, err
	}
	return opt, nil
}

// redisURLError is the usage error of a --redis URL go-redis refused.
func (c *Conn) redisURLError(err error) error {
	// url.Parse quotes the whole URL, password included: keep only what
	// it says is wrong.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return Usagef("redis URL %s: %s (%s)", RedactURL(c.RedisURL), c.scrub(err), redisForms)
}

// redisTLSConfig adds --redis-tls-ca and the client certificate to cfg,
// the TLS settings of a rediss URL (nil for the others).
func (c *Conn) redisTLSConfig(cfg *tls.Config) error {
	if cfg == nil {
		return nil
	}
	if c.redisTLS.ca != "" {
		pem, err := os.ReadFile(c.redisTLS.ca)
		if err != nil {
			return Usagef("--redis-tls-ca %s: %v", c.redisTLS.ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Usagef("--redis-tls-ca %s: no PEM certificate in it", c.redisTLS.ca)
		}
		cfg.RootCAs = pool
	}
	if c.redisTLS.cert != "" {
		cert, err := tls.LoadX509KeyPair(c.redisTLS.cert, c.redisTLS.key)
		if err != nil {
			return Usagef("--redis-tls-cert %s / --redis-tls-key %s: %v", c.redisTLS.cert, c.redisTLS.key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// checkRedis pings the store's Redis and checks that the URL's form (one
// server or a Cluster) is what the server is: a single-node client on a
// Cluster node would fail with MOVED on the runs whose slots live
// elsewhere, and a Cluster client on a plain server cannot start at all.
func (c *Conn) checkRedis(ctx context.Context, rdb redis.UniversalClient) error {
	where := RedactURL(c.RedisURL)
	_, isCluster := rdb.(*redis.ClusterClient)
	if err := rdb.Ping(ctx).Err(); err != nil {
		hint := redisHint(err, strings.HasPrefix(c.RedisURL, "rediss") && c.redisTLS.cert == "")
		if isCluster && hint == "" {
			if enabled, known := c.clusterEnabled(ctx, rdb.(*redis.ClusterClient).Options()); known && !enabled {
				hint = " (that server is not in cluster mode (cluster-enabled no): for a single server write redis:// instead of redis+cluster://)"
			}
		}
		return fmt.Errorf("connect to Redis at %s: %w%s", where, c.scrubbed(err), hint)
	}
	if cl, ok := rdb.(*redis.Client); ok {
		if enabled, known := infoClusterEnabled(ctx, cl); known && enabled {
			return Usagef("Redis at %s is a Redis Cluster node: write the URL as redis+cluster://host:port?addr=host2:port&addr=host3:port "+
				"(rediss+cluster:// for TLS), or every run whose slot lives on another node fails with MOVED", where)
		}
	}
	return nil
}

// clusterEnabled asks the first seed of a Cluster URL whether it runs in
// cluster mode; known is false when it could not tell (down, or INFO is
// not allowed to this user).
func (c *Conn) clusterEnabled(ctx context.Context, opt *redis.ClusterOptions) (enabled, known bool) {
	if len(opt.Addrs) == 0 {
		return false, false
	}
	cl := redis.NewClient(&redis.Options{Addr: opt.Addrs[0], Username: opt.Username, Password: opt.Password,
		TLSConfig: opt.TLSConfig, DialTimeout: 2 * time.Second, MaxRetries: -1})
	defer cl.Close()
	return infoClusterEnabled(ctx, cl)
}

// infoClusterEnabled reads cluster_enabled from INFO cluster.
func infoClusterEnabled(ctx context.Context, cl *redis.Client) (enabled, known bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := cl.Info(ctx, "cluster").Result()
	if err != nil {
		return false, false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_enabled:"); ok {
			return v == "1", true
		}
	}
	return false, false
}

// redisHint says what to do about the usual refusals. noClientCert: the
// URL is TLS and no client certificate was given.
//
// A server that verifies clients refuses one without a certificate with an
// alert after the handshake (TLS 1.3) and closes the connection: the
// client sees the alert ("remote error") only if it reads before it
// writes; a write to the closed connection fails with a reset instead.
func redisHint(err error, noClientCert bool) string {
	var op *net.OpError
	switch {
	case redis.IsAuthError(err):
		return " (check the user and password in the Redis URL: redis://user:password@host:port)"
	case redis.IsPermissionError(err):
		return " (the Redis ACL user lacks a command or key the store needs)"
	case isCertError(err):
		return " (the server's certificate is not trusted: pass its CA with --redis-tls-ca)"
	case errors.As(err, &op) && op.Op == "remote error":
		return " (the server refused the TLS session: if it verifies clients (tls-auth-clients), pass --redis-tls-cert and --redis-tls-key)"
	case noClientCert && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)):
		return " (the server closed the TLS session: if it verifies clients (tls-auth-clients), pass --redis-tls-cert and --redis-tls-key)"
	}
	return ""
}
