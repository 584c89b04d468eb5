package cli_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/schedule"
)

// deployConf is the shipped NATS configuration the tests run unchanged.
const deployConf = "../../deploy/nats/nats-server.conf"

// natsUsers of deploy/nats/nats-server.conf and the inbox prefix each
// takes its replies on.
var natsUsers = map[string]string{
	"worker": "_INBOX_worker", "scheduler": "_INBOX_scheduler", "approver": "_INBOX_approver",
	"cli": "_INBOX", "erp": "_INBOX_erp",
}

// deployNATS is a nats-server running deploy/nats/nats-server.conf with a
// random password per user.
type deployNATS struct {
	*confServer
	pass map[string]string
}

func startDeployNATS(t *testing.T) *deployNATS {
	t.Helper()
	conf, err := filepath.Abs(deployConf)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployNATS{pass: map[string]string{}}
	var env []string
	for user := range natsUsers {
		d.pass[user] = "pw-" + user + "-" + randomHex(t, 12)
		env = append(env, "DURABLE_NATS_"+strings.ToUpper(user)+"_PASSWORD="+d.pass[user])
	}
	d.confServer = startNATSConf(t, conf, env...)
	return d
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// flags are the durable command-line flags connecting as user.
func (d *deployNATS) flags(user string) []string {
	return []string{"--nats", d.URL, "--nats-user", user, "--nats-password", d.pass[user], "--nats-inbox-prefix", natsUsers[user]}
}

// asUser is a plain nats.go connection as one of the users; errs receives
// its asynchronous errors (permission violations).
type asUser struct {
	t    *testing.T
	user string
	nc   *nats.Conn
	errs chan error
}

func (d *deployNATS) connect(t *testing.T, user string) *asUser {
	t.Helper()
	u := &asUser{t: t, user: user, errs: make(chan error, 100)}
	nc, err := nats.Connect(d.URL, nats.UserInfo(user, d.pass[user]), nats.CustomInboxPrefix(natsUsers[user]),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case u.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	u.nc = nc
	return u
}

// refused fails the test unless the server answers the operation with a
// permissions violation naming subject. The server sends it before the
// PONG of the flush, so it is on its way once the flush returns.
func (u *asUser) refused(op, subject string) {
	u.t.Helper()
	for len(u.errs) > 0 {
		<-u.errs
	}
	switch op {
	case "publish":
		if err := u.nc.Publish(subject, []byte(`{"run_id":"x","workflow":"claim","step":1}`)); err != nil {
			u.t.Fatal(err)
		}
	case "subscribe":
		sub, err := u.nc.SubscribeSync(subject)
		if err != nil {
			u.t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	default:
		u.t.Fatalf("unknown op %s", op)
	}
	if err := u.nc.FlushTimeout(5 * time.Second); err != nil {
		u.t.Fatal(err)
	}
	want := `Publish to "` + subject + `"`
	if op == "subscribe" {
		want = `Subscription to "` + subject + `"`
	}
	select {
	case err := <-u.errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), want) {
			u.t.Fatalf("%s %s %s: got %v, want a permissions violation", u.user, op, subject, err)
		}
	case <-time.After(3 * time.Second):
		u.t.Fatalf("%s may %s %s: the server did not refuse it", u.user, op, subject)
	}
}

// The shipped NATS configuration lets each component publish and subscribe
// only where it must, and still runs a whole deployment: a worker, a
// scheduler, an approver, the operator CLI and an external approval system,
// each with its own credentials, take claims to the end with no permission
// violation anywhere.
func TestNATSPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server process")
	}
	clearConnEnv(t)
	d := startDeployNATS(t)

	t.Run("credentials are required", func(t *testing.T) {
		if nc, err := nats.Connect(d.URL, nats.RetryOnFailedConnect(false)); err == nil {
			nc.Close()
			t.Fatal("connected without credentials")
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("no credentials: %v, want an authorization violation", err)
		}
		if nc, err := nats.Connect(d.URL, nats.UserInfo("worker", d.pass["erp"])); err == nil {
			nc.Close()
			t.Fatal("connected as worker with erp's password")
		}
	})

	t.Run("inbox prefix", func(t *testing.T) {
		r := runCLI("runs", "list", "--nats", d.URL, "--nats-user", "worker", "--nats-password", d.pass["worker"])
		if r.code == 0 || !strings.Contains(r.stderr, "--nats-inbox-prefix") || !strings.Contains(r.stderr, "_INBOX_<user>") {
			t.Fatalf("worker without its inbox prefix: %s", r)
		}
		assertNoSecrets(t, "refusal", r.stdout+r.stderr, d.pass)
	})

	// Refusals that need no streams: what each user must never do.
	forbidden := []struct{ user, op, subject, why string }{
		// The acceptance pair.
		{"worker", "publish", "durable.approvals.erp", "a worker can't approve"},
		{"erp", "publish", "durable.step.claim.x", "an external system can't drive steps"},

		{"worker", "publish", "durable.approvals.crm", "nor as any other system"},
		{"worker", "subscribe", "durable.approvals.*", "nor read approval events"},
		{"worker", "publish", "durable.events.claim.reminder", "reminders are the scheduler's"},
		{"worker", "publish", "$JS.API.STREAM.DELETE.DURABLE_STEPS", "no stream deletion"},
		{"worker", "publish", "$JS.API.STREAM.PURGE.KV_durable", "no purge of the checkpoints"},
		{"worker", "publish", "$JS.API.CONSUMER.DELETE.DURABLE_STEPS.steps-claim", "no consumer deletion"},
		{"worker", "subscribe", "_INBOX.>", "no one else's replies"},
		{"worker", "subscribe", "_INBOX_erp.>", "no one else's replies"},
		{"worker", "subscribe", "durable.step.>", "steps come through the consumer only"},

		{"erp", "publish", "durable.approvals.crm", "an external system speaks for itself only"},
		{"erp", "publish", "$JS.API.INFO", "no JetStream API"},
		{"erp", "publish", "$JS.API.STREAM.INFO.DURABLE_STEPS", "no JetStream API"},
		{"erp", "publish", "$JS.API.DIRECT.GET.KV_durable.$KV.durable.run.x", "no reading run records"},
		{"erp", "publish", "$KV.durable.run.x", "no writing run records"},
		{"erp", "publish", "durable.dlq.claim.x", "no dead letters"},
		{"erp", "subscribe", "durable.approvals.*", "no reading other systems' events"},
		{"erp", "subscribe", "durable.>", "no reading durable's traffic"},
		{"erp", "subscribe", "_INBOX.>", "no one else's replies"},
		{"erp", "subscribe", "_INBOX_approver.>", "no one else's replies"},

		{"scheduler", "publish", "durable.approvals.erp", "expiry is not an approval event"},
		{"scheduler", "publish", "$KV.durable.cp.x.1", "checkpoints are the worker's"},
		{"scheduler", "publish", "$KV.durable.wf.claim.1", "workflows are registered by workers"},
		{"scheduler", "publish", "$JS.API.CONSUMER.MSG.NEXT.DURABLE_STEPS.steps-claim", "no taking steps"},
		{"scheduler", "publish", "$JS.ACK.DURABLE_STEPS.steps-claim.1.1.1.1.1.1", "no acking steps"},
		{"scheduler", "publish", "durable.dlq.claim.x", "dead letters are the worker's"},
		{"scheduler", "publish", "$JS.API.STREAM.CREATE.KV_durable", "no provisioning"},
		{"scheduler", "subscribe", "durable.approvals.*", "no reading approval events"},

		{"approver", "publish", "durable.approvals.erp", "no posing as an external system"},
		{"approver", "publish", "_INBOX_erp.forged", "replies only to a request it received"},
		{"approver", "publish", "$KV.durable.cp.x.1", "checkpoints are the worker's"},
		{"approver", "publish", "$KV.durable.due.x", "the deadline index is the scheduler's"},
		{"approver", "publish", "durable.events.claim.reminder", "reminders are the scheduler's"},
		{"approver", "publish", "durable.dlq.claim.x", "dead letters are the worker's"},
		{"approver", "publish", "$JS.API.STREAM.PURGE.DURABLE_STEPS", "no stream management"},
		{"approver", "subscribe", "durable.step.>", "no reading steps"},

		{"cli", "publish", "durable.approvals.erp", "the operator decides with `durable approve`"},

		{"worker", "publish", "$JS.API.STREAM.DELETE.KV_durable_limits", "no deleting the rate limits"},
		{"scheduler", "publish", "$KV.durable_limits.l.model", "rate limits are the workers' and the operator's"},
		{"approver", "publish", "$KV.durable_limits.l.model", "rate limits are the workers' and the operator's"},
		{"erp", "publish", "$KV.durable_limits.l.model", "rate limits are the workers' and the operator's"},
	}
	conns := map[string]*asUser{}
	for user := range natsUsers {
		conns[user] = d.connect(t, user)
	}
	for _, f := range forbidden {
		t.Run("refused/"+f.user+"/"+f.op+"/"+f.subject, func(t *testing.T) {
			u := *conns[f.user]
			u.t = t
			u.refused(f.op, f.subject)
		})
	}

	// The deployment, in the order that shows the start order does not
	// matter: the scheduler comes first and waits for a worker to
	// provision the checkpoint bucket, which its user may not create.
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	pay, err := payments.Open(filepath.Join(t.TempDir(), "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pay.Close() })
	paySrv := httptest.NewServer(pay.Handler())
	t.Cleanup(paySrv.Close)
	t.Setenv("DURABLE_PAYMENTS_URL", paySrv.URL)

	ctx, cancel := context.WithCancel(context.Background())
	logs := map[string]*testenv.Buffer{"worker": {}, "scheduler": {}, "approver": {}}
	done := map[string]chan error{}
	run := func(name string, fn func() error) {
		ch := make(chan error, 1)
		done[name] = ch
		go func() { ch <- fn() }()
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		for name, ch := range done {
			select {
			case err := <-ch:
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop", name)
			}
		}
	}
	t.Cleanup(stop)

	run("scheduler", func() error {
		return cli.RunScheduler(ctx, append(d.flags("scheduler"), "--interval", "100ms", "--lease", "2s"), logs["scheduler"])
	})
	t.Cleanup(func() {
		if t.Failed() {
			for name, buf := range logs {
				t.Logf("%s log:\n%s", name, buf)
			}
		}
	})
	testenv.Eventually(t, 20*time.Second, "the scheduler to be refused the bucket's creation", func() bool {
		out := logs["scheduler"].String()
		return strings.Contains(out, "open JetStream KV store") && strings.Contains(out, `Permissions Violation for Publish to \"$JS.API.`)
	})
	run("worker", func() error {
		return cli.RunWorker(ctx, append(d.flags("worker"), "--ack-wait", "2s", "--concurrency", "4"), logs["worker"], cli.ReferenceWorkflows)
	})

	// The operator CLI takes its credentials from env.
	t.Setenv("DURABLE_NATS_USER", "cli")
	t.Setenv("DURABLE_NATS_PASSWORD", d.pass["cli"])
	var cliOut strings.Builder
	durable := func(args ...string) result {
		t.Helper()
		r := runCLI(append(args, "--nats", d.URL)...)
		cliOut.WriteString(r.stdout + r.stderr)
		return r
	}
	testenv.Eventually(t, 30*time.Second, "durable start as cli (once a worker registered claim)", func() bool {
		return durable("start", "claim", "--id", "sec-approved").code == 0
	})
	// The approver starts once the bucket is there: from its first
	// connection on, it must hit no refusal.
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens.json")
	token, err := tokens.Create(tokenFile, "ops", []string{"adjusters"})
	if err != nil {
		t.Fatal(err)
	}
	opsToken, err := tokens.Create(tokenFile, "pat", []string{"operators"})
	if err != nil {
		t.Fatal(err)
	}
	const erpSecret = "erp-secret-0123456789abcdef"
	secrets := writeFile(t, dir, "event-secrets.json", `{"erp": {"secret": "`+erpSecret+`", "groups": ["adjusters", "supervisors"]}}`)
	run("approver", func() error {
		return cli.RunApprover(ctx, append(d.flags("approver"), "--http", "127.0.0.1:0", "--tokens", tokenFile, "--event-secrets", secrets), logs["approver"])
	})

	if r := durable("start", "claim", "--id", "sec-expired", "--input", `{"approval_ttl": "1s"}`); r.code != 0 {
		t.Fatalf("start sec-expired: %s", r)
	}
	show := func(id string) client.RunView {
		t.Helper()
		r := durable("runs", "show", id, "--json")
		var v client.RunView
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
			t.Fatalf("runs show %s: %s", id, r)
		}
		return v
	}
	waitFor := func(id string, want checkpoint.Status) client.RunView {
		t.Helper()
		var v client.RunView
		testenv.Eventually(t, 30*time.Second, id+" "+string(want), func() bool {
			v = show(id)
			return v.Status == want
		})
		return v
	}

	// The external system approves with a signed event, as a request: it
	// gets the approver's answer on its own inbox.
	parked := waitFor("sec-approved", checkpoint.StatusWaiting)
	erp := conns["erp"]
	body, err := json.Marshal(approver.Event{
		ID: "erp-evt-1", System: "erp", RunID: "sec-approved", Step: parked.Wait.Step,
		PayloadSHA256: parked.Wait.PayloadSHA256, Decision: checkpoint.DecisionApproved, By: "olga", TS: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var reply approver.EventReply
	testenv.Eventually(t, 30*time.Second, "the approver to answer erp's event", func() bool {
		msg := nats.NewMsg(approver.EventSubjectPrefix + "erp")
		msg.Data = body
		msg.Header.Set(approver.SignatureHeader, approver.Sign(erpSecret, body))
		resp, err := erp.nc.RequestMsg(msg, 2*time.Second)
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
			return false // the approver is not subscribed yet
		}
		if err != nil {
			t.Fatalf("erp request: %v", err)
		}
		if err := json.Unmarshal(resp.Data, &reply); err != nil {
			t.Fatalf("erp reply %q: %v", resp.Data, err)
		}
		return true
	})
	if !reply.OK {
		t.Fatalf("approver refused erp's event: %+v", reply)
	}
	done1 := waitFor("sec-approved", checkpoint.StatusCompleted)
	if n := len(done1.Approvals); n != 1 || done1.Approvals[0].By != "erp:olga" || done1.Approvals[0].Channel != client.ChannelEvent {
		t.Fatalf("approvals of sec-approved: %+v", done1.Approvals)
	}
	if ps, err := (payments.Client{BaseURL: paySrv.URL}).List(context.Background(), payments.WithKey("sec-approved:step6")); err != nil || len(ps) != 1 {
		t.Fatalf("payment of sec-approved: %v %+v", err, ps)
	}

	// The scheduler escalates the unanswered request, then rejects it: the
	// run fails at the rejection, through the worker.
	expired := waitFor("sec-expired", checkpoint.StatusFailed)
	if n := len(expired.Approvals); n == 0 || expired.Approvals[n-1].By != "scheduler" || expired.Approvals[n-1].Channel != client.ChannelScheduler {
		t.Fatalf("approvals of sec-expired: %+v", expired.Approvals)
	}

	// The approver's API lists pending approvals by watching run records.
	if r := durable("start", "claim", "--id", "sec-pending"); r.code != 0 {
		t.Fatalf("start sec-pending: %s", r)
	}
	waitFor("sec-pending", checkpoint.StatusWaiting)
	var pending approver.List
	if code := apiGet(t, approverAddr(t, logs["approver"]), token, "/api/approvals", &pending); code != http.StatusOK ||
		len(pending.Approvals) != 1 || pending.Approvals[0].RunID != "sec-pending" {
		t.Fatalf("GET /api/approvals: %d %+v", code, pending)
	}
	if r := durable("dlq", "list", "--json"); r.code != 0 {
		t.Fatalf("dlq list: %s", r)
	}
	checkScheduleAPIRights(t, approverAddr(t, logs["approver"]), opsToken)

	// Reminder events are the scheduler's; the claim workflow sends none,
	// so publish one as the scheduler to show the right is there.
	sjs, err := jetstream.New(conns["scheduler"].nc)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if _, err := sjs.Publish(pctx, "durable.events.claim.reminder", []byte(`{}`)); err != nil {
		t.Fatalf("scheduler publishes a reminder event: %v", err)
	}
	// Retention: the scheduler deletes a purged run's keys, checkpoints
	// included, with the stream's purge by key (it writes none of them).
	kvStream, err := sjs.Stream(pctx, "KV_durable")
	if err != nil {
		t.Fatalf("scheduler reads the checkpoint bucket's stream: %v", err)
	}
	if err := kvStream.Purge(pctx, jetstream.WithPurgeSubject("$KV.durable.cp.sec-none.1")); err != nil {
		t.Fatalf("scheduler purges a run's checkpoint key: %v", err)
	}
	ajs, err := jetstream.New(conns["approver"].nc)
	if err != nil {
		t.Fatal(err)
	}
	checkArchiveRights(t, pctx, sjs, ajs, "sec-pending")
	// Dead letters are the worker's; no run here dies.
	wjs, err := jetstream.New(conns["worker"].nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wjs.Publish(pctx, "durable.dlq.claim.sec-none", []byte(`{}`)); err != nil {
		t.Fatalf("worker publishes a dead letter: %v", err)
	}
	// Rate limits: the operator sets one; a worker takes its tokens and
	// slows it down after a 429 (the worker process opened the bucket).
	if r := durable("limit", "set", "model", "--rate", "10/s", "--burst", "5", "--concurrency", "2", "--concurrency-per-key", "1"); r.code != 0 {
		t.Fatalf("limit set as cli: %s", r)
	}
	checkFlowRights(t, pctx, conns["worker"], wjs)
	// An external system's JetStream publish of a step is refused: no
	// PubAck, and nothing lands in the step stream.
	ejs, err := jetstream.New(erp.nc)
	if err != nil {
		t.Fatal(err)
	}
	ectx, ecancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ecancel()
	if _, err := ejs.Publish(ectx, "durable.step.claim.sec-forged", []byte(`{"run_id":"sec-forged","workflow":"claim","step":1}`)); err == nil {
		t.Fatal("erp published a step message through JetStream")
	}
	cjs, err := jetstream.New(conns["cli"].nc)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := cjs.Stream(pctx, "DURABLE_STEPS")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := steps.GetLastMsgForSubject(pctx, "durable.step.claim.sec-forged"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a forged step is in the stream: %v %v", m, err)
	}

	stop()
	for name, buf := range logs {
		out := buf.String()
		if name == "scheduler" {
			// Refused the bucket's creation until the worker provisioned
			// it; from its start on, nothing.
			_, out, _ = strings.Cut(out, `"message":"scheduler started"`)
		}
		if strings.Contains(out, "Permissions Violation") || strings.Contains(out, "permissions violation") {
			t.Errorf("%s hit a permissions violation: its allow list is too tight:\n%s", name, out)
		}
		assertNoSecrets(t, name+" log", out, d.pass)
	}
	assertNoSecrets(t, "CLI output", cliOut.String(), d.pass)
	if out := logs["worker"].String(); !strings.Contains(out, `"auth":"user worker"`) {
		t.Errorf("worker log does not say how it authenticated:\n%s", out)
	}
	if t.Failed() {
		t.Logf("nats-server log:\n%s", d.Log())
	}
}

// checkFlowRights does as user, with js, all a worker does with the rate
// limits (pkg/flow), with no permission violation.
func checkFlowRights(t *testing.T, ctx context.Context, u *asUser, js jetstream.JetStream) {
	t.Helper()
	st, err := flow.NewStore(ctx, js, flow.StoreOptions{})
	if err != nil {
		t.Fatalf("%s opens the limits: %v", u.user, err)
	}
	lim := flow.NewLimiter(st, flow.LimiterOptions{})
	if _, err := lim.Take(ctx, "model", time.Now()); err != nil {
		t.Errorf("%s takes a token: %v", u.user, err)
	}
	for _, name := range []string{"model", "unlimited-api"} { // a record with a TTL for the second
		if err := lim.SlowDown(ctx, name, time.Now().Add(time.Second)); err != nil {
			t.Errorf("%s slows %s down: %v", u.user, name, err)
		}
	}
	if _, err := st.List(ctx); err != nil {
		t.Errorf("%s lists the limits: %v", u.user, err)
	}
	// Concurrency: the worker's pool watches the limits and writes its
	// leases (its key's record, created, and the resource's), taking a
	// slot, then gives them back as it closes (the key's record purged).
	pool, err := flow.NewPool(ctx, st, flow.PoolOptions{})
	if err != nil {
		t.Fatalf("%s opens a pool: %v", u.user, err)
	}
	got := make(chan *flow.Slot, 1)
	if s, _ := pool.Acquire("model", flow.Queue{}, func(s *flow.Slot) { got <- s }); s != nil {
		t.Errorf("%s took a slot before leasing any", u.user)
	} else {
		select {
		case s := <-got:
			s.Release()
		case <-ctx.Done():
			t.Errorf("%s got no slot of model: %v", u.user, ctx.Err())
		}
	}
	pool.Close()
	if slots, err := st.Concurrency(ctx, "model"); err != nil || slots.Holders != 0 {
		t.Errorf("%s's pool left %+v, %v", u.user, slots, err)
	}
	if per, err := st.ConcurrencyPerKey(ctx, "model"); err != nil || per.PerKey != 1 || len(per.Keys) != 0 {
		t.Errorf("%s's pool left keys of the per-key limit: %+v, %v", u.user, per, err)
	}
	if err := u.nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-u.errs:
		t.Errorf("%s with the limits: %v", u.user, err)
	default:
	}
}

func assertNoSecrets(t *testing.T, what, out string, pass map[string]string) {
	t.Helper()
	for user, p := range pass {
		if strings.Contains(out, p) {
			t.Errorf("%s shows %s's password", what, user)
		}
	}
}

// The shipped configuration refuses to start without its passwords rather
// than run with empty ones.
func TestNATSConfigNeedsPasswords(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nats-server")
	}
	conf, err := filepath.Abs(deployConf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := execNATS(t, "-c", conf, "-t")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "DURABLE_NATS_WORKER_PASSWORD") {
		t.Fatalf("nats-server -t without passwords: %v\n%s", err, out)
	}
	cmd = execNATS(t, "-c", conf, "-t")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for user := range natsUsers {
		cmd.Env = append(cmd.Env, "DURABLE_NATS_"+strings.ToUpper(user)+"_PASSWORD=x")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats-server -t: %v\n%s", err, out)
	}
}

// approverAddr is the HTTP address the approver logged it serves on.
func approverAddr(t *testing.T, log *testenv.Buffer) string {
	t.Helper()
	for _, line := range strings.Split(log.String(), "\n") {
		var l struct{ HTTP, Message string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "approver serving" {
			return l.HTTP
		}
	}
	t.Fatalf("the approver did not log its address:\n%s", log)
	return ""
}

func apiGet(t *testing.T, addr, token, path string, into any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode
}

// checkScheduleAPIRights: an operator creates, triggers (twice: the
// second cancels the first's run, overlap cancel-previous), pauses and
// deletes a schedule through the approver's API, which needs the
// approver's user to read and write the schedules' bucket, start runs and
// cancel them.
func checkScheduleAPIRights(t *testing.T, addr, token string) {
	t.Helper()
	spec := `{"name": "sec-nightly", "workflow": "claim", "cron": "0 2 * * *", "overlap": "cancel-previous"}`
	if code, body := apiDo(t, http.MethodPost, addr, token, "/api/schedules", spec); code != http.StatusCreated {
		t.Fatalf("POST /api/schedules: %d %s", code, body)
	}
	trigger := func() schedule.Fire {
		t.Helper()
		code, body := apiDo(t, http.MethodPost, addr, token, "/api/schedules/sec-nightly/trigger", "")
		var f schedule.Fire
		if code != http.StatusOK || json.Unmarshal(body, &f) != nil || f.Result != schedule.Started {
			t.Fatalf("trigger: %d %s", code, body)
		}
		return f
	}
	one := trigger()
	var two schedule.Fire
	testenv.Eventually(t, 5*time.Second, "a trigger in another second", func() bool {
		two = trigger()
		return two.RunID != one.RunID
	})
	if two.Cancelled != one.RunID {
		t.Errorf("the second trigger %+v did not cancel %s", two, one.RunID)
	}
	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "/api/schedules/sec-nightly/pause"},
		{http.MethodGet, "/api/schedules"},
		{http.MethodDelete, "/api/schedules/sec-nightly"},
	} {
		if code, body := apiDo(t, req.method, addr, token, req.path, ""); code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", req.method, req.path, code, body)
		}
	}
}

func apiDo(t *testing.T, method, addr, token, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
