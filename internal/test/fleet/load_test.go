package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// plannedRun is a run the test starts.
type plannedRun struct {
	id       string
	workflow string
	input    json.RawMessage
	decide   bool   // parks for a decision the test takes
	payKey   string // the one payment it must make
	amount   int64
	steps    int // checkpoints of a completed run; 0: any
}

// plan is the load: claims that pay without approval, claims that park for
// an adjuster, and refund-agent runs that park for a supervisor, mixed.
func plan(claims, approvals, refunds int) []plannedRun {
	var runs []plannedRun
	add := func(r plannedRun) { runs = append(runs, r) }
	ci, ai, ri := 0, 0, 0
	for ci < claims || ai < approvals || ri < refunds {
		// Roughly in proportion, so that each kind meets every fault.
		if ci < claims {
			ci++
			id := fmt.Sprintf("claim-%04d", ci)
			add(plannedRun{id: id, workflow: "claim", input: json.RawMessage(`{"amount": 500}`), payKey: id + ":step6", amount: 500, steps: 9})
		}
		if ai < approvals && ci*approvals >= ai*claims {
			ai++
			id := fmt.Sprintf("claim-big-%03d", ai)
			add(plannedRun{id: id, workflow: "claim", input: json.RawMessage(`{"amount": 1840}`), decide: true, payKey: id + ":step6", amount: 1840, steps: 9})
		}
		if ri < refunds && ci*refunds >= ri*claims {
			ri++
			id := fmt.Sprintf("refund-%03d", ri)
			add(plannedRun{id: id, workflow: "refund-agent", input: json.RawMessage(`{"order_id": "A-1001", "message": "My blender arrived broken."}`),
				decide: true, payKey: id + ":step4", amount: 149})
		}
	}
	return runs
}

// starter starts the planned runs at a steady pace over span, retrying
// each until the fleet takes it (a NATS node or a Redis primary may be
// down meanwhile).
type starter struct {
	f       *Fleet
	retries atomic.Int64
	errs    sync.Map // error text -> count (*atomic.Int64)
	first   time.Time
}

func (s *starter) run(ctx context.Context, runs []plannedRun, span time.Duration) error {
	gap := span / time.Duration(max(len(runs), 1))
	s.first = time.Now()
	next := s.first
	var wg sync.WaitGroup
	errs := make(chan error, len(runs))
	for _, r := range runs {
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		next = next.Add(gap)
		// Each start on its own, as independent callers would: one that
		// waits out a failover does not hold back the others.
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.start(ctx, r); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (s *starter) start(ctx context.Context, r plannedRun) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, _, err := s.f.Client.Start(cctx, client.StartRequest{Workflow: r.workflow, RunID: r.id, Input: r.input, By: "fleet-test"})
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("start %s: %w", r.id, err)
		}
		s.retries.Add(1)
		n, _ := s.errs.LoadOrStore(shortErr(err), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		time.Sleep(200 * time.Millisecond)
	}
}

// decider is who takes the decisions in the fleet test.
const decider = "fleet-adjuster"

// approver takes the decisions the parked runs wait for, through the
// client over the cluster, as a person with the inbox open would.
type approver struct {
	f *Fleet

	mu       sync.Mutex
	decided  map[string]int // run -> decisions recorded
	failures map[string]int // error text -> count
}

func newApprover(f *Fleet) *approver {
	return &approver{f: f, decided: map[string]int{}, failures: map[string]int{}}
}

func (d *approver) run(ctx context.Context, runs []plannedRun) {
	var ids []string
	for _, r := range runs {
		if r.decide {
			ids = append(ids, r.id)
		}
	}
	for ctx.Err() == nil {
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			d.round(ctx, id)
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (d *approver) round(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	run, err := d.f.Store.GetRun(cctx, id)
	if err != nil || run.Status != checkpoint.StatusWaiting || run.Wait == nil || (run.Wait.Kind != "" && run.Wait.Kind != checkpoint.WaitApproval) {
		return
	}
	_, err = d.f.Client.Decide(cctx, client.Decision{RunID: id, By: decider, Channel: client.ChannelAPI,
		PayloadSHA256: run.Wait.PayloadSHA256, Step: run.Wait.Step, Reason: "fleet test: checked"})
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.failures[shortErr(err)]++
		return
	}
	d.decided[id]++
}

func (d *approver) snapshot() (decided int, failures map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.decided {
		decided += n
	}
	failures = map[string]int{}
	for k, v := range d.failures {
		failures[k] = v
	}
	return decided, failures
}

var runIDs = regexp.MustCompile(`(claim(-big)?|refund)-[0-9]+`)

// shortErr is an error's text without run ids, to count kinds of errors.
func shortErr(err error) string {
	s := runIDs.ReplaceAllString(err.Error(), "<run>")
	if len(s) > 140 {
		s = s[:140] + "..."
	}
	return s
}
