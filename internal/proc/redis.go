package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisConfig says how to run a redis-server. With only Dir set it is a
// server on a free 127.0.0.1 port that keeps nothing on disk.
type RedisConfig struct {
	// Dir is the server's data directory; its logs go there too. Required.
	Dir string
	// Port is its TCP port on 127.0.0.1. Default: a free one (none with
	// Unix).
	Port int
	// Unix makes it listen on the unix socket Dir/redis.sock, mode 700.
	Unix bool
	// AOF turns the append-only file on with this appendfsync policy:
	// "always" (a restart loses nothing that was acknowledged) or
	// "everysec" (Redis's default). Default: no AOF and no snapshots,
	// unless ConfigFile says otherwise.
	AOF string
	// ClusterNodeTimeout, when set, makes the server a Redis Cluster node
	// (nodes.conf in Dir) whose replica takes over once it has been
	// unreachable that long; a port picked for it has its bus port
	// (+10000) free too.
	ClusterNodeTimeout time.Duration
	// ConfigFile is read first: the settings above override it.
	ConfigFile string
	// Args go last (TLS, ACL users, requirepass...) and may override
	// anything above.
	Args []string
}

// Redis is a running redis-server. Start, Kill and Restart keep its port
// and data directory: with the AOF on it replays its writes.
type Redis struct {
	*Proc
	URL  string // redis://127.0.0.1:PORT/0, or unix://SOCKET without a TCP port
	Addr string // 127.0.0.1:PORT, "" without a TCP port
	Port int
	Sock string // the unix socket, "" without one
	Dir  string
}

// startTimeout bounds a server's start: a redis-server replaying its AOF,
// a nats-server node catching up with its cluster.
const startTimeout = 60 * time.Second

// StartRedis starts redis-server from PATH and waits until it answers. An
// error wraps exec.ErrNotFound when redis-server is not installed. A port
// it picked that another process took meanwhile makes it try another.
func StartRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	if cfg.Dir == "" {
		return nil, errors.New("redis-server: no data directory")
	}
	for attempt := 1; ; attempt++ {
		r, err := startRedisOnce(ctx, bin, cfg)
		if err == nil {
			return r, nil
		}
		if attempt < 5 && r != nil && lostPortRace(r.Proc) {
			continue
		}
		return nil, err
	}
}

func startRedisOnce(ctx context.Context, bin string, cfg RedisConfig) (r *Redis, err error) {
	r = &Redis{Port: cfg.Port, Dir: cfg.Dir}
	if r.Port == 0 && !cfg.Unix {
		offset := 0
		if cfg.ClusterNodeTimeout > 0 {
			offset = 10000
		}
		if r.Port, err = FreePort(offset); err != nil {
			return nil, err
		}
	}
	var args []string
	if cfg.ConfigFile != "" {
		args = append(args, cfg.ConfigFile)
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	if cfg.AOF != "" {
		args = append(args, "--appendonly", "yes", "--appendfsync", cfg.AOF)
	}
	args = append(args, "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", cfg.Dir)
	if r.Port != 0 {
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port))
		r.URL = "redis://" + r.Addr + "/0"
	}
	if cfg.Unix {
		r.Sock = filepath.Join(cfg.Dir, "redis.sock")
		args = append(args, "--unixsocket", r.Sock, "--unixsocketperm", "700")
		if r.Port == 0 {
			r.URL = "unix://" + r.Sock
		}
	}
	if cfg.ClusterNodeTimeout > 0 {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(cfg.ClusterNodeTimeout.Milliseconds(), 10))
	}
	args = append(args, cfg.Args...)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	r.Proc = New(Config{Name: "redis", Path: bin, Args: args, Dir: cfg.Dir})
	if err := r.start(ctx); err != nil {
		_ = r.Stop(0)
		return r, err
	}
	return r, nil
}

// Start starts the server again and waits until it answers.
func (r *Redis) Start() error {
	return r.start(context.Background())
}

func (r *Redis) start(ctx context.Context) error {
	if err := r.Proc.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return r.WaitReady(ctx, r.ping)
}

// Restart kills the server, waits pause, and starts it on the same port
// and data directory.
func (r *Redis) Restart(pause time.Duration) error {
	if err := r.Kill(); err != nil {
		return err
	}
	time.Sleep(pause)
	return r.Start()
}

// ping succeeds once the server answers a command: PONG, or a refusal to
// serve a client without credentials; not LOADING while it replays its
// AOF.
func (r *Redis) ping() error {
	network, addr := "tcp", r.Addr
	if r.Sock != "" {
		network, addr = "unix", r.Sock
	}
	c, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
		return nil
	}
	return errors.New(strings.TrimSpace(line))
}

// RedisVersion is the version of the redis-server on PATH ("7.2.4"), ""
// when it cannot tell.
func RedisVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return ""
}
