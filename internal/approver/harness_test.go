package approver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Event systems of the harness: erp decides for adjusters, crm for claims.
var eventSystems = map[string]approver.EventSystem{
	"erp": {Secret: "erp-secret-0123456789abcdef", Groups: []string{"adjusters"}},
	"crm": {Secret: "crm-secret-0123456789abcdef", Groups: []string{"claims"}},
}

// harness is one isolated deployment: its own nats-server, redis-server
// (or KV store), a real worker running the test workflow, and the
// approver under test behind an httptest server.
type harness struct {
	t      testing.TB
	nc     *nats.Conn
	js     jetstream.JetStream
	store  checkpoint.Store
	client *client.Client
	srv    *approver.Server
	http   *httptest.Server
	logs   *testenv.Buffer
	tokens map[string]string // identity -> token
	set    *tokens.Set
}

var prefixSeq atomic.Int64

func newHarness(t testing.TB, kind string, mod func(*approver.Config)) *harness {
	t.Helper()
	n := testenv.StartNATS(t)
	nc, js := n.Connect(t)
	h := &harness{t: t, nc: nc, js: js, logs: &testenv.Buffer{}, tokens: map[string]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch kind {
	case "redis":
		r := testenv.StartRedis(t)
		opt, err := redis.ParseURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		h.store = redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("ap%d", prefixSeq.Add(1))})
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "durable"})
		if err != nil {
			t.Fatal(err)
		}
		h.store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	h.client = client.New(js, h.store)

	h.startWorker()

	path := filepath.Join(t.TempDir(), "tokens.json")
	for id, groups := range map[string][]string{
		"ana": {"adjusters"}, "bo": {"adjusters"}, "cy": {"claims"}, "dee": {"claims", "adjusters"}, "ops": {"operators"},
	} {
		tok, err := tokens.Create(path, id, groups)
		if err != nil {
			t.Fatal(err)
		}
		h.tokens[id] = tok
	}
	set, err := tokens.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	h.set = set
	log := zerolog.New(io.MultiWriter(h.logs, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	// The schedules are in a KV bucket whichever store the runs are in.
	schedules, err := schedule.NewStore(ctx, js, schedule.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := approver.Config{
		Client: h.client, Store: h.store, Tokens: set, FourEyes: true, Logger: &log,
		EventSecrets: eventSystems, NATS: nc, Schedules: schedules,
	}
	if mod != nil {
		mod(&cfg)
	}
	h.srv, err = approver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.http = httptest.NewServer(h.srv.Handler())
	t.Cleanup(h.http.Close)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("approver Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("approver Run did not return after its context ended")
		}
	})
	// No token or payload ever reaches the log.
	t.Cleanup(func() {
		out := h.logs.String()
		for id, tok := range h.tokens {
			if strings.Contains(out, tok) || strings.Contains(out, strings.TrimPrefix(tok, tokens.Prefix)) {
				t.Errorf("the log holds %s's token", id)
			}
		}
		if strings.Contains(out, `amount`) {
			t.Errorf("the log holds a payload:\n%s", out)
		}
	})
	return h
}

func (h *harness) startWorker() {
	h.t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(h.t)).Level(zerolog.WarnLevel)
	reg := steps.NewRegistry().MustRegister(approvalFlow(), signalFlow(), guardedFlow(), fragileFlow())
	w, err := worker.New(worker.Config{JetStream: h.js, Store: h.store, Registry: reg, Concurrency: 8, AckWait: 2 * time.Second, DrainTimeout: 3 * time.Second, Logger: &log})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("worker.Run: %v", err)
		}
	})
	testenv.Eventually(h.t, 10*time.Second, "workflows registered", func() bool {
		infos, err := h.store.Workflows(context.Background())
		return err == nil && len(infos) >= 2
	})
}

// claim is the test workflow's state.
type claim struct {
	Group  string   `json:"group,omitempty"`
	Amount int      `json:"amount,omitempty"`
	Trail  []string `json:"trail,omitempty"`
}

// approvalFlow parks at step 1 for the group named in the input (default
// adjusters) with payload {run, amount}; approved, it goes on to "done";
// rejected, the run fails.
func approvalFlow() *steps.Workflow[claim] {
	w := steps.New[claim]("approval", 1)
	done := w.Ref("done")
	return w.
		Step("ask", func(_ context.Context, s *steps.Context, st claim) (steps.Outcome[claim], error) {
			if st.Group == "" {
				st.Group = "adjusters"
			}
			if st.Amount == 0 {
				st.Amount = 1840
			}
			req := steps.ApprovalRequest{Payload: map[string]any{"run": s.RunID(), "amount": st.Amount}, Group: st.Group, TTL: time.Hour}
			d, err := s.Approval(req)
			if err != nil {
				return steps.Outcome[claim]{}, err
			}
			if d == nil {
				return steps.Park[claim](req), nil
			}
			if d.Decision != checkpoint.DecisionApproved {
				return steps.Fail(st, "rejected by "+d.By), nil
			}
			st.Trail = append(st.Trail, "approved-by-"+d.By+"-via-"+d.Channel)
			return steps.Next(done, st), nil
		}).
		Step("done", func(_ context.Context, _ *steps.Context, st claim) (steps.Outcome[claim], error) {
			return steps.Complete(st), nil
		})
}

// park starts run id (started by startedBy, parked for group) and waits
// until it waits for approval.
func (h *harness) park(id, startedBy, group string) checkpoint.Run {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	input := fmt.Sprintf(`{"group": %q}`, group)
	if _, _, err := h.client.Start(ctx, client.StartRequest{Workflow: "approval", RunID: id, Input: []byte(input), By: startedBy}); err != nil {
		h.t.Fatalf("start %s: %v", id, err)
	}
	return h.waitStatus(id, checkpoint.StatusWaiting)
}

func (h *harness) run(id string) checkpoint.Run {
	h.t.Helper()
	r, err := h.store.GetRun(context.Background(), id)
	if err != nil {
		h.t.Fatalf("get %s: %v", id, err)
	}
	return r
}

func (h *harness) waitStatus(id string, want checkpoint.Status) checkpoint.Run {
	h.t.Helper()
	var run checkpoint.Run
	testenv.Eventually(h.t, 20*time.Second, fmt.Sprintf("%s %s", id, want), func() bool {
		r, err := h.store.GetRun(context.Background(), id)
		run = r
		return err == nil && r.Status == want
	})
	return run
}

// assertUnchanged fails when the run moved since before was read.
// assertRefusalAudited checks that a refused but signed approval changed
// nothing but the audit, which gained one refused entry for reason.
func (h *harness) assertRefusalAudited(before checkpoint.Run, reason string) {
	h.t.Helper()
	after := h.run(before.ID)
	if after.Status != before.Status || after.Step != before.Step || !reflect.DeepEqual(after.Wait, before.Wait) || !reflect.DeepEqual(after.Approvals, before.Approvals) {
		h.t.Fatalf("run %s decision state changed:\nbefore %+v\nafter  %+v", before.ID, before, after)
	}
	if len(after.Audit) != len(before.Audit)+1 {
		h.t.Fatalf("run %s audit: %d entries, want %d", before.ID, len(after.Audit), len(before.Audit)+1)
	}
	last := after.Audit[len(after.Audit)-1]
	if last.Kind != checkpoint.AuditRefused || !strings.HasPrefix(last.Reason, reason+":") || last.Channel != "event" {
		h.t.Fatalf("run %s last audit entry %+v, want refused %s", before.ID, last, reason)
	}
}

func (h *harness) assertUnchanged(before checkpoint.Run) {
	h.t.Helper()
	after := h.run(before.ID)
	if !reflect.DeepEqual(before, after) {
		h.t.Fatalf("run %s changed:\nbefore %+v\nafter  %+v", before.ID, before, after)
	}
}

// do sends an HTTP request to the approver; body is sent as is.
func (h *harness) do(method, path, token, body string, header map[string]string) (int, http.Header, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.http.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h.http.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func decision(sha string, step int, reason string) string {
	b, _ := json.Marshal(approver.DecisionRequest{PayloadSHA256: sha, Step: step, Reason: reason})
	return string(b)
}

// publishEvent publishes body on the approval subject of system, signed
// with secret; see publishOn.
func (h *harness) publishEvent(system, secret string, body []byte) approver.EventReply {
	h.t.Helper()
	return h.publishOn(approver.EventSubjectPrefix+system, secret, body)
}

// publishOn publishes ev on subject, signed with secret
// (no header when secret is ""), as a request, and returns the reply. It
// retries while the approver has not subscribed yet.
func (h *harness) publishOn(subject, secret string, body []byte) approver.EventReply {
	h.t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = body
	if secret != "" {
		msg.Header.Set(approver.SignatureHeader, approver.Sign(secret, body))
	}
	var reply *nats.Msg
	testenv.Eventually(h.t, 10*time.Second, "an approver answers events", func() bool {
		var err error
		reply, err = h.nc.RequestMsg(msg, 10*time.Second)
		if err != nil && err != nats.ErrNoResponders {
			h.t.Fatalf("event request: %v", err)
		}
		return err == nil
	})
	var r approver.EventReply
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		h.t.Fatalf("event reply %s: %v", reply.Data, err)
	}
	return r
}

func mustTokens(t testing.TB, h *harness) *tokens.Set {
	t.Helper()
	return h.set
}

func newRecorder(handler http.Handler, method, path, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o600) }
