package deploycheck

import (
	"context"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeEnv is what deploy/.env would hold: every variable the compose
// file requires. The values are fake; TestRedisConfRuns logs in with
// DURABLE_REDIS_PASSWORD's.
func composeEnv(t testing.TB) map[string]string {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tokens": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DURABLE_REDIS_PASSWORD": "redis0123456789abcdef",
		"DURABLE_TOKENS_FILE":    tokens,
	}
	for _, u := range []string{"WORKER", "SCHEDULER", "APPROVER", "CLI", "ERP", "ROUTE"} {
		env["DURABLE_NATS_"+u+"_PASSWORD"] = strings.ToLower(u) + "0123456789abcdef"
	}
	return env
}

// loadCompose loads a compose file as docker compose does: interpolation
// from env, then the compose-spec schema (unknown keys are errors), then
// normalization and path resolution against the file's directory.
func loadCompose(t testing.TB, path string, env map[string]string) (*types.Project, error) {
	t.Helper()
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path}},
		Environment: env,
	})
}

func composeProject(t testing.TB) *types.Project {
	t.Helper()
	p, err := loadCompose(t, deployPath(t, "docker-compose.yml"), composeEnv(t))
	if err != nil {
		t.Fatalf("load deploy/docker-compose.yml: %v", err)
	}
	return p
}

var (
	natsNodes        = []string{"nats-1", "nats-2", "nats-3"}
	durableServices  = map[string]int{"worker": 3, "scheduler": 2, "approver": 1}
	durableNATSUsers = map[string]string{"worker": "worker", "scheduler": "scheduler", "approver": "approver"}
)

func TestComposeFleet(t *testing.T) {
	p := composeProject(t)

	want := append(slices.Clone(natsNodes), "redis")
	want = append(want, slices.Collect(maps.Keys(durableServices))...)
	slices.Sort(want)
	got := p.ServiceNames()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}

	for _, s := range p.Services {
		if s.Restart != types.RestartPolicyUnlessStopped && s.Restart != types.RestartPolicyAlways {
			t.Errorf("%s: restart %q, want unless-stopped or always", s.Name, s.Restart)
		}
		if !slices.Contains(s.CapDrop, "ALL") || !s.ReadOnly {
			t.Errorf("%s: want cap_drop [ALL] and read_only", s.Name)
		}
		// Published ports: the approver's HTTP and NATS monitoring only,
		// on the host's loopback.
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s: port %d published on %q, want 127.0.0.1", s.Name, port.Target, port.HostIP)
			}
			switch {
			case s.Name == "approver" && port.Target == 8081:
			case slices.Contains(natsNodes, s.Name) && port.Target == 8222:
			default:
				t.Errorf("%s: publishes port %d; only the approver's 8081 and NATS monitoring (8222) may be", s.Name, port.Target)
			}
		}
	}
	if len(p.Services["approver"].Ports) != 1 {
		t.Errorf("approver: want its HTTP port published on 127.0.0.1")
	}

	// Each durable service: the image built from deploy/Dockerfile, the
	// replicas asked for, streams at R3, every NATS node, its own NATS
	// user and inbox prefix, Redis, flags the binary has, and a start
	// after NATS and Redis are healthy.
	image := ""
	for name, replicas := range durableServices {
		s := p.Services[name]
		if s.Build == nil || s.Build.Dockerfile != "deploy/Dockerfile" || s.Build.Context != repoRoot(t) {
			t.Errorf("%s: build %+v, want context the repository root and dockerfile deploy/Dockerfile", name, s.Build)
		}
		if image == "" {
			image = s.Image
		} else if s.Image != image {
			t.Errorf("%s: image %s, others use %s", name, s.Image, image)
		}
		if s.GetScale() != replicas {
			t.Errorf("%s: %d replicas, want %d", name, s.GetScale(), replicas)
		}
		env := func(k string) string {
			if v := s.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		if v := env("DURABLE_REPLICAS"); v != "3" {
			t.Errorf("%s: DURABLE_REPLICAS=%q, want 3 (streams at R3 on the three-node cluster)", name, v)
		}
		if hosts := natsHosts(t, env("DURABLE_NATS_URL")); !slices.Equal(hosts, []string{"nats-1:4222", "nats-2:4222", "nats-3:4222"}) {
			t.Errorf("%s: DURABLE_NATS_URL names %v, want all three nodes", name, hosts)
		}
		user := durableNATSUsers[name]
		if env("DURABLE_NATS_USER") != user || env("DURABLE_NATS_INBOX_PREFIX") != "_INBOX_"+user {
			t.Errorf("%s: NATS user %q with inbox prefix %q, want %s and _INBOX_%s (deploy/nats/README.md)",
				name, env("DURABLE_NATS_USER"), env("DURABLE_NATS_INBOX_PREFIX"), user, user)
		}
		if want := "DURABLE_NATS_" + strings.ToUpper(user) + "_PASSWORD"; env("DURABLE_NATS_PASSWORD") != composeEnv(t)[want] {
			t.Errorf("%s: DURABLE_NATS_PASSWORD is not ${%s}", name, want)
		}
		if u, err := url.Parse(env("DURABLE_REDIS_URL")); err != nil || u.Scheme != "redis" || u.Host != "redis:6379" || u.User.Username() != "durable" {
			t.Errorf("%s: DURABLE_REDIS_URL %q, want redis://durable:...@redis:6379/0", name, env("DURABLE_REDIS_URL"))
		}
		for k := range s.Environment {
			checkEnv(t, "compose "+name, k)
		}
		checkArgs(t, "compose "+name, s.Command)
		if _, ok := flagValue(s.Command, "metrics"); !ok {
			t.Errorf("%s: no --metrics: /healthz and /readyz are served there", name)
		}
		for _, dep := range append(slices.Clone(natsNodes), "redis") {
			if d, ok := s.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: want depends_on %s with condition service_healthy", name, dep)
			}
		}
	}

	// The approver reads the token file compose mounts.
	ap := p.Services["approver"]
	tokens, _ := flagValue(ap.Command, "tokens")
	if len(ap.Secrets) != 1 || tokens != "/run/secrets/"+ap.Secrets[0].Source {
		t.Errorf("approver: --tokens %q, secrets %+v: want the approver-tokens secret's file", tokens, ap.Secrets)
	}

	// NATS: each node runs its own cluster config (checked with the
	// server's parser by TestNATSClusterConfigs) and is health-checked.
	for i, name := range natsNodes {
		s := p.Services[name]
		conf := "/etc/nats/cluster/nats-" + string(rune('1'+i)) + ".conf"
		if !slices.Equal(s.Command, []string{"nats-server", "--config", conf}) {
			t.Errorf("%s: command %v, want nats-server --config %s", name, s.Command, conf)
		}
		if host := hostPath(s, "/etc/nats"); host != deployPath(t, "nats") {
			t.Errorf("%s: /etc/nats is %q, want deploy/nats", name, host)
		}
		if s.HealthCheck == nil || !strings.Contains(strings.Join(s.HealthCheck.Test, " "), "/healthz") {
			t.Errorf("%s: want a healthcheck on the monitoring port's /healthz", name)
		}
	}

	// Redis: deploy/redis/redis.conf (AOF on: TestRedisConf), nothing on
	// the command line that turns it off, and a healthcheck.
	r := p.Services["redis"]
	if len(r.Command) < 2 || r.Command[0] != "redis-server" || hostPath(r, r.Command[1]) != deployPath(t, "redis", "redis.conf") {
		t.Errorf("redis: command %v, want redis-server with deploy/redis/redis.conf mounted at its path", r.Command)
	}
	for i, a := range r.Command {
		if (a == "--appendonly" && i+1 < len(r.Command) && r.Command[i+1] != "yes") || a == "--save" {
			t.Errorf("redis: %v overrides redis.conf's persistence", r.Command)
		}
	}
	if r.HealthCheck == nil || len(r.HealthCheck.Test) == 0 {
		t.Errorf("redis: want a healthcheck")
	}
}

// natsHosts returns the host:port of every URL in a comma-separated list.
func natsHosts(t testing.TB, list string) []string {
	t.Helper()
	var hosts []string
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Scheme != "nats" {
			t.Errorf("NATS URL %q: want nats://host:port", s)
			continue
		}
		hosts = append(hosts, u.Host)
	}
	slices.Sort(hosts)
	return hosts
}

// hostPath is the host path bind-mounted at target (or a directory above
// it) in s, joined with the rest of target; "" when nothing is.
func hostPath(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if target == v.Target {
			return v.Source
		}
		if rest, ok := strings.CutPrefix(target, v.Target+"/"); ok {
			return filepath.Join(v.Source, rest)
		}
	}
	return ""
}

// Every file the compose file mounts exists.
func TestComposeMountsExist(t *testing.T) {
	p := composeProject(t)
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s: mounts %s: %v", s.Name, v.Source, err)
			}
		}
	}
}

// The loader is strict: a misspelt key anywhere fails the load, so
// TestComposeFleet can't pass on a file docker compose would refuse.
func TestComposeRejectsUnknownKeys(t *testing.T) {
	for _, m := range []struct{ old, new string }{
		{"    stop_grace_period: 40s", "    stop_grace_perod: 40s"}, // a service key
		{"  restart: unless-stopped", "  restrat: unless-stopped"},  // inside an anchor
		{"      replicas: 3", "      replica: 3"},                   // under deploy
		{"    start_period: 10s", "    start_periode: 10s"},         // under healthcheck
	} {
		path := writeMutated(t, deployPath(t, "docker-compose.yml"), m.old, m.new)
		_, err := loadCompose(t, path, composeEnv(t))
		t.Logf("%q → %q: %v", m.old, m.new, err)
		key := strings.TrimSpace(strings.Split(m.new, ":")[0])
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q misspelt as %q: load error %v, want one naming %s", m.old, m.new, err, key)
		}
	}
}

// Without its secrets the file does not load: compose says which is
// missing instead of starting a fleet with empty passwords.
func TestComposeRequiresSecrets(t *testing.T) {
	full := composeEnv(t)
	for k := range full {
		env := maps.Clone(full)
		delete(env, k)
		if _, err := loadCompose(t, deployPath(t, "docker-compose.yml"), env); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("without %s: load error %v, want one naming it", k, err)
		}
	}
}

// The tracing profile adds a Jaeger to try traces with: off by default,
// hardened like the rest, its UI on the loopback only; every durable
// service takes the OTLP variables (empty: tracing off).
func TestComposeTracingProfile(t *testing.T) {
	if _, ok := composeProject(t).Services["jaeger"]; ok {
		t.Fatal("jaeger runs without --profile tracing")
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(deployPath(t, "docker-compose.yml")),
		ConfigFiles: []types.ConfigFile{{Filename: deployPath(t, "docker-compose.yml")}},
		Environment: composeEnv(t),
	}, loader.WithProfiles([]string{"tracing"}))
	if err != nil {
		t.Fatal(err)
	}
	j, ok := p.Services["jaeger"]
	if !ok {
		t.Fatal("no jaeger service with --profile tracing")
	}
	if !strings.HasPrefix(j.Image, "jaegertracing/jaeger:") || strings.HasSuffix(j.Image, ":latest") {
		t.Errorf("jaeger image %q, want a pinned jaegertracing/jaeger", j.Image)
	}
	if !j.ReadOnly || !slices.Contains(j.CapDrop, "ALL") {
		t.Errorf("jaeger: want read_only and cap_drop [ALL]")
	}
	if len(j.Ports) != 1 || j.Ports[0].HostIP != "127.0.0.1" || j.Ports[0].Target != 16686 {
		t.Errorf("jaeger ports %+v, want its UI on 127.0.0.1:16686 only", j.Ports)
	}
	for name := range durableServices {
		env := p.Services[name].Environment
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "DURABLE_TRACE_URL"} {
			if _, ok := env[k]; !ok {
				t.Errorf("%s: no %s", name, k)
			}
		}
	}
}
