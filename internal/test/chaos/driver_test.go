package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
	"github.com/durable-run/durable/pkg/client"
)

// plannedRun is a run the suite starts, or a child run a batch starts.
type plannedRun struct {
	id       string
	workflow string
	input    json.RawMessage
	steps    int  // checkpoints of a completed run
	child    bool // started by its parent, not by the suite
}

// The sizes of the suite's parallel runs.
const (
	fanoutBranches = 5
	batchChildren  = 2
)

// plan makes the claims and agent runs, interleaved in a random order.
func plan(cfg config, rng *rand.Rand) []plannedRun {
	var runs []plannedRun
	for i := 1; i <= cfg.claims; i++ {
		runs = append(runs, plannedRun{id: fmt.Sprintf("claim-%04d", i), workflow: "claim", input: json.RawMessage(`{"amount": 1840}`), steps: 9})
	}
	for i := 1; i <= cfg.agents; i++ {
		turns := 2 + rng.IntN(5)
		runs = append(runs, plannedRun{id: fmt.Sprintf("agent-%04d", i), workflow: "agent-loop",
			input: json.RawMessage(fmt.Sprintf(`{"turns": %d}`, turns)), steps: 2*turns + 2})
	}
	for i := 1; i <= cfg.fanouts; i++ {
		runs = append(runs, plannedRun{id: fmt.Sprintf("fanout-%04d", i), workflow: "fanout",
			input: json.RawMessage(fmt.Sprintf(`{"branches": %d}`, fanoutBranches)), steps: 2})
	}
	for i := 1; i <= cfg.batches; i++ {
		id := fmt.Sprintf("batch-%04d", i)
		runs = append(runs, plannedRun{id: id, workflow: "claims-batch", input: json.RawMessage(fmt.Sprintf(`{"count": %d}`, batchChildren)), steps: 2})
		for c := 1; c <= batchChildren; c++ {
			runs = append(runs, plannedRun{id: fmt.Sprintf("%s-%d", id, c), workflow: "claim", input: json.RawMessage(`{"amount": 1840}`), steps: 9, child: true})
		}
	}
	for i := 1; i <= cfg.shipments; i++ {
		runs = append(runs, plannedRun{id: fmt.Sprintf("ship-%04d", i), workflow: "shipment", input: json.RawMessage(`{}`), steps: 1})
	}
	rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	return runs
}

// starter starts the planned runs spread over a time span, retrying each
// until the fleet accepts it (NATS or Redis may be down meanwhile).
type starter struct {
	e       *env
	retries atomic.Int64
}

func (s *starter) run(ctx context.Context, runs []plannedRun, span time.Duration) error {
	gap := span / time.Duration(max(len(runs), 1))
	next := time.Now()
	for _, r := range runs {
		if r.child {
			continue
		}
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		next = next.Add(gap)
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _, err := s.e.client.Start(cctx, client.StartRequest{Workflow: r.workflow, RunID: r.id, Input: r.input, By: "chaos-suite"})
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("start %s: %w", r.id, err)
			}
			s.retries.Add(1)
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// approverDriver approves parked claims through the approver's HTTP API,
// as an adjuster with the inbox open would.
type approverDriver struct {
	e    *env
	http *http.Client

	mu       sync.Mutex
	accepted map[string][]fleetcheck.Decision // run -> decisions answered 200
	status   map[int]int                      // HTTP status of decision requests -> count
	errors   int                              // requests that got no answer
}

func newApproverDriver(e *env) *approverDriver {
	return &approverDriver{e: e, http: &http.Client{Timeout: 5 * time.Second},
		accepted: map[string][]fleetcheck.Decision{}, status: map[int]int{}}
}

// run approves what is pending every interval until ctx ends.
func (a *approverDriver) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *approverDriver) round(ctx context.Context) {
	var list approver.List
	if err := a.do(ctx, http.MethodGet, "/api/approvals", nil, &list); err != nil {
		return
	}
	for _, p := range list.Approvals {
		// An adjuster takes a moment to look: some decisions then land
		// while NATS or Redis is down, or while a worker is frozen.
		if time.Since(p.Since) < thinkTime(p.RunID) {
			continue
		}
		body, _ := json.Marshal(approver.DecisionRequest{PayloadSHA256: p.PayloadSHA256, Step: p.Step, Reason: "chaos suite: payout checked"})
		var res approver.DecisionResult
		err := a.do(ctx, http.MethodPost, "/api/approvals/"+p.RunID+"/approve", body, &res)
		if err == nil {
			a.mu.Lock()
			a.accepted[p.RunID] = append(a.accepted[p.RunID], fleetcheck.Decision{By: adjuster, Step: res.Step, SHA256: res.PayloadSHA256})
			a.mu.Unlock()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// thinkTime is how long the adjuster looks at run's payout: 0 to 2s,
// fixed per run.
func thinkTime(run string) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(run))
	return time.Duration(h.Sum32()%2000) * time.Millisecond
}

type statusError int

func (s statusError) Error() string { return fmt.Sprintf("HTTP %d", int(s)) }

func (a *approverDriver) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.e.approverURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		if method == http.MethodPost {
			a.mu.Lock()
			a.errors++
			a.mu.Unlock()
		}
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if method == http.MethodPost {
		a.mu.Lock()
		a.status[resp.StatusCode]++
		a.mu.Unlock()
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

func (a *approverDriver) snapshot() (accepted map[string][]fleetcheck.Decision, status map[int]int, errs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	accepted = map[string][]fleetcheck.Decision{}
	for k, v := range a.accepted {
		accepted[k] = append([]fleetcheck.Decision(nil), v...)
	}
	status = map[int]int{}
	for k, v := range a.status {
		status[k] = v
	}
	return accepted, status, a.errors
}

// signaller sends each shipment its "delivered" signal through the
// approver's API, as a shipping system would, under one id per run, until
// the API answers: through outages a retried id is delivered once. A
// signal may come before its run waits for it, even before the run exists
// (404, sent again).
type signaller struct {
	a    *approverDriver
	mu   sync.Mutex
	sent map[string]bool
}

func (s *signaller) run(ctx context.Context, runs []plannedRun, every time.Duration) {
	s.sent = map[string]bool{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, r := range runs {
			if r.workflow != "shipment" || s.done(r.id) {
				continue
			}
			body, _ := json.Marshal(approver.SignalRequest{Data: json.RawMessage(fmt.Sprintf(`{"run": %q}`, r.id)), ID: "chaos-" + r.id})
			var res approver.SignalResult
			err := s.a.do(ctx, http.MethodPost, "/api/runs/"+r.id+"/signals/delivered", body, &res)
			if err == nil || err == statusError(http.StatusConflict) {
				s.mu.Lock()
				s.sent[r.id] = true
				s.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *signaller) done(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[id]
}
