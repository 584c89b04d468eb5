package natscli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/demo/examples/reference"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

const (
	readme     = "../../../docs/replay.md"
	deployConf = "../../../deploy/nats/nats-server.conf"
	workflow   = "claim"
)

// The runs the recipes of docs/replay.md name: two claims that complete, one that
// dies at step 6 because the payments API is down.
var (
	completed = []string{"claim-0040", "claim-0041"}
	deadRun   = "claim-0042"
	allRuns   = append(append([]string(nil), completed...), deadRun)
)

// TestReadmeReplayRecipes runs every block of docs/replay.md's "Replay and
// redrive" section, as written, against a live fleet, and proves that
// nothing ran twice.
func TestReadmeReplayRecipes(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: nats CLI, nats-server, redis-server, worker processes")
	}
	blocks := readmeBlocks(t)
	for _, name := range []string{"connect", "view", "replay-run", "replay-window", "republish-dead", "redrive"} {
		if blocks[name] == "" {
			t.Fatalf("docs/replay.md has no block marked <!-- replay-test: %s -->", name)
		}
	}
	// The CLI builds while the fleet runs the claims (a minute the first
	// time, then it comes from the cache).
	type installed struct {
		path string
		err  error
	}
	cli := make(chan installed, 1)
	go func() {
		p, err := testenv.InstallNATSCLI()
		cli <- installed{p, err}
	}()

	began := time.Now()
	f := startFleet(t)
	t.Logf("fleet up after %s", time.Since(began).Round(time.Millisecond))
	ctx := context.Background()
	// claim-0042 is under the approval threshold, so it reaches its payment
	// at once and spends its 8 attempts (about a minute of backoff) while
	// the others run.
	f.start(deadRun, `{"amount": 900}`)
	for _, id := range completed {
		f.start(id, "")
	}
	f.drive(2 * time.Minute)
	f.waitDrained()

	t.Logf("claims settled after %s", time.Since(began).Round(time.Millisecond))
	got := <-cli
	t.Logf("nats CLI ready after %s", time.Since(began).Round(time.Millisecond))
	if got.err != nil {
		t.Skipf("nats CLI %s cannot be installed, so the replay recipes are untested here: %v", testenv.NATSCLIVersion, got.err)
	}
	sh := &shell{t: t, connect: blocks["connect"], subst: map[string]string{
		"<nats-url>": f.natsURL, "<cli-password>": f.pass["cli"], "<redis-url>": f.redisURL, "<your-name>": "oncall-test",
	}, path: filepath.Dir(got.path) + string(os.PathListSeparator) + filepath.Dir(testenv.DurableBin(t))}

	before := f.snapshot()
	dl := f.deadLetters()
	if len(dl) != 1 || dl[0].RunID != deadRun || dl[0].Step != 6 {
		t.Fatalf("dead letters before the recipes: %+v, want one for %s at step 6", dl, deadRun)
	}

	// Look first.
	out := sh.run("view", blocks["view"])
	for _, want := range []string{
		"Stream DURABLE_STEPS", "steps-claim", "durable.step.claim.claim-0041", "durable.step.claim.claim-0040",
		`"run_id":"claim-0040","workflow":"claim","step":9`, // the last step message
		"durable.dlq.claim.claim-0042", `"step_name":"pay"`, "failed 8 times", "503",
		"status dead", // durable runs show
	} {
		if !strings.Contains(out, want) {
			t.Errorf("view: output lacks %q", want)
		}
	}

	// Replay one run: every stored message of claim-0040 goes to the workers again.
	n := f.subjectCount("durable.step.claim.claim-0040")
	last := f.lastSeq()
	sh.run("replay-run", blocks["replay-run"])
	f.waitDelivered(last+uint64(n), "replay of claim-0040")
	f.unchanged(before, "after replaying claim-0040")
	f.noReplayConsumers()

	// Replay a time window: every message of the last 30 minutes.
	total := f.lastSeq() // all of them are younger than 30 minutes
	sh.run("replay-window", blocks["replay-window"])
	f.waitDelivered(2*total, "replay of the window")
	f.unchanged(before, "after replaying the window")
	f.noReplayConsumers()
	f.sameDeadLetter(dl[0], "after replaying the window")

	// Republish the dead letter's step: the run stays dead.
	last = f.lastSeq()
	sh.run("republish-dead", blocks["republish-dead"])
	f.waitDelivered(last+1, "republished dead step")
	f.unchanged(before, "after republishing the dead letter's step")
	f.sameDeadLetter(dl[0], "after republishing the dead letter's step")

	// The payments API is back: redrive, and the run completes with one payment.
	f.payDown.Store(false)
	out = sh.run("redrive", blocks["redrive"])
	if !strings.Contains(out, "redriven claim-0042 at step 6 pay") {
		t.Errorf("redrive: output lacks the redrive line:\n%s", out)
	}
	run := f.waitStatus(deadRun, checkpoint.StatusCompleted, time.Minute)
	if run.Redrives != 1 {
		t.Errorf("%s: %d redrives, want 1", deadRun, run.Redrives)
	}
	f.waitDrained()
	f.unchanged(before, "after the redrive") // the completed runs
	pays := f.payments()
	for _, id := range allRuns {
		p, ok := pays[id+":step6"]
		switch {
		case !ok:
			t.Errorf("%s: no payment", id)
		case p.Requests != 1:
			t.Errorf("%s: payment key presented %d times, want 1: no step ran twice", id, p.Requests)
		}
	}
	if len(pays) != len(allRuns) {
		t.Errorf("%d payments, want %d: %v", len(pays), len(allRuns), pays)
	}
	if cps, err := f.store.Checkpoints(ctx, deadRun); err != nil || len(cps) != 9 {
		t.Errorf("%s: %d checkpoints (%v), want 9", deadRun, len(cps), err)
	}
	t.Logf("payments API refused %d requests of %s while down", f.refused.Load(), deadRun)
}

// readmeBlocks returns the fenced blocks of docs/replay.md marked with
// <!-- replay-test: NAME -->, by name.
func readmeBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- replay-test: ([a-z-]+) -->\n```sh\n(.*?)```")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if _, dup := out[m[1]]; dup {
			t.Fatalf("docs/replay.md: two blocks named %s", m[1])
		}
		out[m[1]] = m[2]
	}
	return out
}

// shell runs the recipe blocks with bash, after the connect block, with only
// the recipes' placeholders substituted.
type shell struct {
	t       *testing.T
	connect string
	subst   map[string]string
	path    string
}

var placeholder = regexp.MustCompile(`<[a-z][a-z-]*>`)

func (s *shell) run(name, block string) string {
	s.t.Helper()
	script := "set -euo pipefail\n" + s.connect + block
	for k, v := range s.subst {
		script = strings.ReplaceAll(script, k, v)
	}
	if p := placeholder.FindString(script); p != "" {
		s.t.Fatalf("block %s: placeholder %s has no value in the test", name, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = []string{"PATH=" + s.path + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + s.t.TempDir(), "LANG=C"}
	out, err := cmd.CombinedOutput()
	s.t.Logf("--- recipe block %s\n%s", name, out)
	if err != nil {
		s.t.Fatalf("recipe block %s: %v", name, err)
	}
	return string(out)
}

// fleet: nats-server with deploy/nats/nats-server.conf, redis-server, the
// payments API in this process and two `durable worker` processes.
type fleet struct {
	t        *testing.T
	dir      string
	natsURL  string
	natsLogs func() []string
	pass     map[string]string
	redisURL string
	payURL   string
	pay      *payments.Server
	payDown  atomic.Bool // claim-0042's payments answer 503
	refused  atomic.Int64
	js       jetstream.JetStream
	store    checkpoint.Store
	client   *client.Client
	workers  []string // log paths
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir(), pass: map[string]string{}}
	f.startNATS()
	r := testenv.StartRedis(t)
	f.redisURL = r.URL
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	f.store = redisstore.New(rdb, redisstore.Options{})

	// The test reads and approves as the operator: the cli user.
	nc, err := nats.Connect(f.natsURL, nats.UserInfo("cli", f.pass["cli"]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	f.client = client.New(f.js, f.store)

	f.startPayments()
	f.payDown.Store(true)
	for i := 1; i <= 2; i++ {
		f.startWorker(i)
	}
	testenv.WaitWorkflows(t, f.store, time.Minute, reference.Workflows().Names()...)
	return f
}

// startNATS runs the module's nats-server with the shipped configuration
// on free loopback ports, its store in a temp dir, with a password per
// user.
func (f *fleet) startNATS() {
	var env []string
	for _, user := range []string{"worker", "scheduler", "approver", "cli", "erp"} {
		f.pass[user] = randomHex(f.t)
		env = append(env, "DURABLE_NATS_"+strings.ToUpper(user)+"_PASSWORD="+f.pass[user])
	}
	n := testenv.StartNATSServer(f.t, testenv.NATSConfigFile(deployConf), testenv.NATSEnv(env...))
	f.natsURL = n.URL
	f.natsLogs = n.Logs
}

// startPayments serves the demo payments API; while payDown is set it
// answers claim-0042's payments with 503, as a provider that is down.
func (f *fleet) startPayments() {
	t := f.t
	pay, err := payments.Open(filepath.Join(f.dir, "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	f.pay = pay
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := http.StripPrefix("/demo/payments", pay.Handler())
	mux := http.NewServeMux()
	mux.Handle("/demo/payments/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && f.payDown.Load() && strings.HasPrefix(r.Header.Get("Idempotency-Key"), deadRun+":") {
			f.refused.Add(1)
			http.Error(w, `{"error":"payments provider unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	f.payURL = "http://" + lis.Addr().String() + "/demo/payments"
	t.Cleanup(func() {
		_ = srv.Close()
		_ = pay.Close()
	})
}

// startWorker runs `durable worker` as the worker user of the shipped config.
func (f *fleet) startWorker(i int) {
	logPath := filepath.Join(f.dir, fmt.Sprintf("worker-%d.log", i))
	cmd := exec.Command(testenv.DurableBin(f.t), "worker", "--nats", f.natsURL, "--nats-user", "worker",
		"--nats-inbox-prefix", "_INBOX_worker", "--redis", f.redisURL,
		"--ack-wait", "2s", "--concurrency", "4", "--drain-timeout", "1s")
	cmd.Env = append(cleanEnv(), "DURABLE_NATS_PASSWORD="+f.pass["worker"], "DURABLE_PAYMENTS_URL="+f.payURL, "DURABLE_LOG_LEVEL=info")
	f.workers = append(f.workers, logPath)
	f.startProc(cmd, logPath)
}

// startProc starts cmd with its output in logPath; at cleanup it gets
// SIGTERM, then SIGKILL after 10 s.
func (f *fleet) startProc(cmd *exec.Cmd, logPath string) {
	t := f.t
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
	})
}

// cleanEnv is this process's environment without settings that would
// point a durable command elsewhere.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DURABLE_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	return env
}

func (f *fleet) start(id, input string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: workflow, RunID: id, Input: []byte(input)}); err != nil {
		f.t.Fatalf("start %s: %v", id, err)
	}
}

// drive approves runs as they park until the completed runs are completed
// and the dead run is dead.
func (f *fleet) drive(timeout time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		done := 0
		for _, id := range allRuns {
			run, err := f.store.GetRun(ctx, id)
			if err != nil {
				f.t.Fatalf("get %s: %v", id, err)
			}
			if run.Status == checkpoint.StatusWaiting {
				if _, err := f.client.Decide(ctx, client.Decision{RunID: id, By: "adjuster-test", Channel: client.ChannelCLI}); err != nil {
					f.t.Logf("approve %s: %v", id, err)
				}
			}
			want := checkpoint.StatusCompleted
			if id == deadRun {
				want = checkpoint.StatusDead
			}
			if run.Status == want {
				done++
			} else if run.Status.Terminal() {
				f.dumpLogs()
				f.t.Fatalf("%s ended %s (%s), want %s", id, run.Status, run.Error, want)
			}
		}
		if done == len(allRuns) {
			return
		}
		if time.Now().After(deadline) {
			f.dumpLogs()
			f.t.Fatalf("runs not settled after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fleet) waitStatus(id string, want checkpoint.Status, timeout time.Duration) checkpoint.Run {
	f.t.Helper()
	var run checkpoint.Run
	deadline := time.Now().Add(timeout)
	for {
		r, err := f.store.GetRun(context.Background(), id)
		if err == nil && r.Status == want {
			return r
		}
		run = r
		if time.Now().After(deadline) {
			f.dumpLogs()
			f.t.Fatalf("%s is %s (%s) after %s, want %s", id, run.Status, run.Error, timeout, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fleet) stepConsumer() *jetstream.ConsumerInfo {
	f.t.Helper()
	c, err := f.js.Consumer(context.Background(), queue.StepStream, queue.ConsumerName(workflow))
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return info
}

// waitDrained waits until the workers' consumer has nothing pending or unacked.
func (f *fleet) waitDrained() {
	f.t.Helper()
	testenv.Eventually(f.t, time.Minute, "step consumer drained", func() bool {
		info := f.stepConsumer()
		return info.NumPending == 0 && info.NumAckPending == 0
	})
}

// waitDelivered checks that the stream holds at least seq messages (the
// replay was stored, not dropped as duplicates) and waits until the
// workers' consumer has taken and acked all of them.
func (f *fleet) waitDelivered(seq uint64, what string) {
	f.t.Helper()
	if last := f.lastSeq(); last < seq {
		f.t.Fatalf("%s: the step stream ends at %d, want at least %d: the replay was not stored", what, last, seq)
	}
	testenv.Eventually(f.t, time.Minute, what+" taken by the workers", func() bool {
		info := f.stepConsumer()
		return info.Delivered.Stream >= seq && info.NumPending == 0 && info.NumAckPending == 0
	})
}

func (f *fleet) streamInfo(name string) *jetstream.StreamInfo {
	f.t.Helper()
	st, err := f.js.Stream(context.Background(), name)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		f.t.Fatal(err)
	}
	return info
}

func (f *fleet) lastSeq() uint64 { return f.streamInfo(queue.StepStream).State.LastSeq }

func (f *fleet) subjectCount(subject string) int {
	n := int(f.streamInfo(queue.StepStream).State.Subjects[subject])
	if n == 0 {
		f.t.Fatalf("no step messages on %s", subject)
	}
	return n
}

// noReplayConsumers: the recipes remove the consumers they add; only the
// workers' consumers (steps-<workflow>) remain.
func (f *fleet) noReplayConsumers() {
	f.t.Helper()
	st, err := f.js.Stream(context.Background(), queue.StepStream)
	if err != nil {
		f.t.Fatal(err)
	}
	names := st.ConsumerNames(context.Background())
	for n := range names.Name() {
		if !strings.HasPrefix(n, queue.ConsumerName("")) {
			f.t.Errorf("consumer %s of %s left behind", n, queue.StepStream)
		}
	}
	if err := names.Err(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fleet) deadLetters() []queue.DeadLetter {
	f.t.Helper()
	dls, err := f.client.DeadLetters(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return dls
}

// sameDeadLetter: the dead letter was not filed again, except as copies
// of the same letter once the stream's 2-minute dedupe window has passed.
func (f *fleet) sameDeadLetter(want queue.DeadLetter, when string) {
	f.t.Helper()
	dls := f.deadLetters()
	for _, d := range dls {
		if d.RunID != want.RunID || d.Step != want.Step || d.Reason != want.Reason {
			f.t.Errorf("%s: a new dead letter %+v", when, d)
		}
	}
	if len(dls) != 1 && time.Since(want.At) < 100*time.Second {
		f.t.Errorf("%s: %d dead letters within the dedupe window, want 1", when, len(dls))
	}
}

func (f *fleet) payments() map[string]payments.Payment {
	f.t.Helper()
	list, err := payments.Client{BaseURL: f.payURL}.List(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	byKey := map[string]payments.Payment{}
	for _, p := range list {
		if _, dup := byKey[p.Key]; dup {
			f.t.Errorf("two payments with key %s", p.Key)
		}
		byKey[p.Key] = p
	}
	return byKey
}

// snapshot renders what no replay may change: each run's status, step,
// revision and checkpoints, and the payments with their request counts.
func (f *fleet) snapshot() map[string]string {
	f.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, id := range allRuns {
		run, err := f.store.GetRun(ctx, id)
		if err != nil {
			f.t.Fatal(err)
		}
		cps, err := f.store.Checkpoints(ctx, id)
		if err != nil {
			f.t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"status": run.Status, "step": run.Step, "rev": run.Rev, "redrives": run.Redrives, "checkpoints": cps})
		out[id] = string(b)
	}
	b, _ := json.Marshal(f.payments())
	out["payments"] = string(b)
	return out
}

// unchanged compares with before; after the redrive only the redriven
// run and the payments may have moved.
func (f *fleet) unchanged(before map[string]string, when string) {
	f.t.Helper()
	after := f.snapshot()
	redriven := after[deadRun] != before[deadRun] && strings.Contains(when, "redrive")
	for k, v := range before {
		if redriven && (k == deadRun || k == "payments") {
			continue
		}
		if after[k] != v {
			f.t.Errorf("%s: %s changed:\nbefore %s\nafter  %s", when, k, v, after[k])
		}
	}
}

func (f *fleet) dumpLogs() {
	for _, p := range append(f.natsLogs(), f.workers...) {
		b, _ := os.ReadFile(p)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		f.t.Logf("--- %s (tail)\n%s", filepath.Base(p), b)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
