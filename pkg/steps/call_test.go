package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// journal is an in-memory steps.Recorder for one step: first writer wins by
// name, as the checkpoint stores promise.
type journal struct {
	mu     sync.Mutex
	recs   map[string]checkpoint.CallRecord
	order  []string
	writes int
	// err, when set, is returned by every RecordCall.
	err error
	// onRecord, when set, sees every record offered, stored or not.
	onRecord func(checkpoint.CallRecord)
}

func newJournal() *journal { return &journal{recs: map[string]checkpoint.CallRecord{}} }

func (j *journal) RecordCall(_ context.Context, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.writes++
	if j.onRecord != nil {
		j.onRecord(rec)
	}
	if j.err != nil {
		return checkpoint.CallRecord{}, j.err
	}
	if old, ok := j.recs[rec.Name]; ok {
		return old, nil
	}
	j.recs[rec.Name] = rec
	j.order = append(j.order, rec.Name)
	return rec, nil
}

// records is what the worker would load as the Journal of the next attempt.
func (j *journal) records() []checkpoint.CallRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]checkpoint.CallRecord, 0, len(j.order))
	for _, n := range j.order {
		out = append(out, j.recs[n])
	}
	return out
}

func (j *journal) writeCount() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.writes
}

// attempt builds the Context of one delivery of step 3 of run claim-0042.
func attempt(n int, j *journal) *steps.Context {
	cfg := steps.ContextConfig{RunID: "claim-0042", Workflow: "claim", Version: 1, Step: 3, StepName: "assess", Attempt: n}
	if j != nil {
		cfg.Recorder = j
		cfg.Journal = j.records()
	}
	return steps.NewContext(cfg)
}

type answer struct {
	Text   string `json:"text"`
	Tokens int    `json:"tokens"`
}

type prompt struct {
	Model  string `json:"model"`
	Prompt string `json:"prompt"`
}

// model counts how often the "model" was really called.
type model struct {
	calls atomic.Int32
	err   error
}

func (m *model) ask(text string) func(context.Context) (answer, error) {
	return func(context.Context) (answer, error) {
		n := m.calls.Add(1)
		if m.err != nil {
			return answer{}, m.err
		}
		return answer{Text: fmt.Sprintf("%s #%d", text, n), Tokens: 7}, nil
	}
}

func argsSum(t *testing.T, args any) string {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return steps.SHA256Hex(b)
}

var ctx = context.Background()

func TestCallFirstRunRecords(t *testing.T) {
	j, m := newJournal(), &model{}
	s := attempt(1, j)
	args := prompt{Model: "m1", Prompt: "assess"}

	got, err := steps.Call(ctx, s, "damage-model", args, m.ask("bumper"))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if want := (answer{Text: "bumper #1", Tokens: 7}); got != want {
		t.Fatalf("Call = %+v, want %+v", got, want)
	}
	if n := m.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	calls := s.Calls()
	if len(calls) != 1 {
		t.Fatalf("Calls() = %+v, want one record", calls)
	}
	c := calls[0]
	if c.Name != "damage-model" || c.ArgsSHA256 != argsSum(t, args) || string(c.Result) != `{"text":"bumper #1","tokens":7}` || c.Replayed || c.At.IsZero() {
		t.Fatalf("Calls()[0] = %+v", c)
	}
	if recs := j.records(); len(recs) != 1 || !reflect.DeepEqual(recs[0], c) {
		t.Fatalf("journal holds %+v, want %+v", recs, c)
	}
}

func TestCallReplaysOnRetry(t *testing.T) {
	j, m := newJournal(), &model{}
	args := prompt{Model: "m1", Prompt: "assess"}
	first, err := steps.Call(ctx, attempt(1, j), "damage-model", args, m.ask("bumper"))
	if err != nil {
		t.Fatalf("attempt 1: %v", err)
	}
	writes := j.writeCount()

	// The worker crashed after the call: attempts 2 and 3 load the journal.
	for n := 2; n <= 3; n++ {
		s := attempt(n, j)
		got, err := steps.Call(ctx, s, "damage-model", args, m.ask("other"))
		if err != nil {
			t.Fatalf("attempt %d: %v", n, err)
		}
		if got != first {
			t.Fatalf("attempt %d got %+v, want the recorded %+v", n, got, first)
		}
		calls := s.Calls()
		if len(calls) != 1 || !calls[0].Replayed || calls[0].Name != "damage-model" || string(calls[0].Result) != `{"text":"bumper #1","tokens":7}` {
			t.Fatalf("attempt %d Calls() = %+v, want one replayed record", n, calls)
		}
		if s.JournalMismatch() {
			t.Fatalf("attempt %d: JournalMismatch() on a faithful replay", n)
		}
	}
	if n := m.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times over three attempts, want 1", n)
	}
	if w := j.writeCount(); w != writes {
		t.Fatalf("replays wrote to the recorder (%d writes, want %d)", w, writes)
	}
}

func TestCallReplayRoundTripsResults(t *testing.T) {
	type nested struct {
		IDs  []int             `json:"ids"`
		Tags map[string]string `json:"tags"`
		At   time.Time         `json:"at"`
		Ptr  *answer           `json:"ptr"`
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	check := func(t *testing.T, name string, v any) {
		t.Helper()
		j := newJournal()
		run := func(n int) any {
			s := attempt(n, j)
			// One case per T: Call is generic over the result type.
			switch v := v.(type) {
			case string:
				got, err := steps.Call(ctx, s, name, nil, func(context.Context) (string, error) { return v, nil })
				must(t, err)
				return got
			case int64:
				got, err := steps.Call(ctx, s, name, nil, func(context.Context) (int64, error) { return v, nil })
				must(t, err)
				return got
			case []string:
				got, err := steps.Call(ctx, s, name, nil, func(context.Context) ([]string, error) { return v, nil })
				must(t, err)
				return got
			case nested:
				got, err := steps.Call(ctx, s, name, nil, func(context.Context) (nested, error) { return v, nil })
				must(t, err)
				return got
			case *answer:
				got, err := steps.Call(ctx, s, name, nil, func(context.Context) (*answer, error) { return v, nil })
				must(t, err)
				return got
			}
			t.Fatalf("no case for %T", v)
			return nil
		}
		first, replay := run(1), run(2)
		if !reflect.DeepEqual(first, replay) {
			t.Fatalf("first run %#v, replay %#v", first, replay)
		}
	}
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"string", "hello <world> & \"you\""},
		{"int64 beyond float precision", int64(1<<62 + 1)},
		{"slice", []string{"a", "b"}},
		{"nil slice", []string(nil)},
		{"struct", nested{IDs: []int{1, 2}, Tags: map[string]string{"k": "v"}, At: at, Ptr: &answer{Text: "x"}}},
		{"nil pointer", (*answer)(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, "c", tc.v) })
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCallFirstRunMatchesReplay(t *testing.T) {
	j := newJournal()
	run := func(n int) map[string]any {
		got, err := steps.Call(ctx, attempt(n, j), "tool", nil, func(context.Context) (map[string]any, error) {
			return map[string]any{"count": 3}, nil
		})
		must(t, err)
		return got
	}
	first, replay := run(1), run(2)
	if !reflect.DeepEqual(first, replay) {
		t.Fatalf("first run saw count %T, the retry %T", first["count"], replay["count"])
	}
}

func TestCallJournalMismatch(t *testing.T) {
	j, m := newJournal(), &model{}
	if _, err := steps.Call(ctx, attempt(1, j), "damage-model", prompt{Prompt: "v1"}, m.ask("a")); err != nil {
		t.Fatal(err)
	}
	s := attempt(2, j)
	if s.JournalMismatch() {
		t.Fatalf("JournalMismatch() before any call")
	}
	got, err := steps.Call(ctx, s, "damage-model", prompt{Prompt: "v2"}, m.ask("b"))
	if !errors.Is(err, steps.ErrJournalMismatch) {
		t.Fatalf("Call with other args: err = %v, want ErrJournalMismatch", err)
	}
	if got != (answer{}) {
		t.Fatalf("Call returned %+v with the mismatch, want the zero value", got)
	}
	if !strings.Contains(err.Error(), "damage-model") || !strings.Contains(err.Error(), "claim-0042:step3") {
		t.Fatalf("error %q does not name the call and the step", err)
	}
	// The engine sees the mismatch even if the step swallows the error.
	if !s.JournalMismatch() {
		t.Fatalf("JournalMismatch() = false after ErrJournalMismatch")
	}
	if n := m.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1: a mismatch must not call again", n)
	}
	if calls := s.Calls(); len(calls) != 0 {
		t.Fatalf("Calls() = %+v after a mismatch, want none", calls)
	}
	// Another name in the same attempt is unaffected, and the flag stays.
	if _, err := steps.Call(ctx, s, "summary", nil, m.ask("c")); err != nil {
		t.Fatalf("other call after a mismatch: %v", err)
	}
	if !s.JournalMismatch() {
		t.Fatalf("JournalMismatch() was reset by a later call")
	}
}

func TestCallArgsIdentifyTheCall(t *testing.T) {
	// Args are compared by their JSON encoding: equal values of other Go
	// types replay; any change in a field is a mismatch.
	for _, tc := range []struct {
		name     string
		recorded any
		now      any
		mismatch bool
	}{
		{"same struct", prompt{Model: "m", Prompt: "p"}, prompt{Model: "m", Prompt: "p"}, false},
		{"map with the same JSON", prompt{Model: "m", Prompt: "p"}, map[string]string{"prompt": "p", "model": "m"}, false},
		{"nil and nil", nil, nil, false},
		{"changed field", prompt{Model: "m", Prompt: "p"}, prompt{Model: "m", Prompt: "q"}, true},
		{"nil then args", nil, "x", true},
		{"number vs string", 1, "1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, m := newJournal(), &model{}
			_, err := steps.Call(ctx, attempt(1, j), "c", tc.recorded, m.ask("a"))
			must(t, err)
			_, err = steps.Call(ctx, attempt(2, j), "c", tc.now, m.ask("b"))
			if got := errors.Is(err, steps.ErrJournalMismatch); got != tc.mismatch {
				t.Fatalf("replay err = %v, mismatch %v, want %v", err, got, tc.mismatch)
			}
		})
	}
}

func TestCallErrorIsNotJournaled(t *testing.T) {
	errDown := errors.New("model overloaded")
	j, m := newJournal(), &model{err: errDown}
	s := attempt(1, j)
	_, err := steps.Call(ctx, s, "damage-model", nil, m.ask("a"))
	if !errors.Is(err, errDown) {
		t.Fatalf("Call err = %v, want fn's error", err)
	}
	if steps.IsPermanent(err) || errors.Is(err, steps.ErrJournalMismatch) {
		t.Fatalf("fn's error became %v", err)
	}
	if len(j.records()) != 0 || len(s.Calls()) != 0 || j.writeCount() != 0 {
		t.Fatalf("a failed call was journaled: %+v", j.records())
	}

	// The step may try again in the same attempt: the name is free again.
	_, err = steps.Call(ctx, s, "damage-model", nil, m.ask("a"))
	if errors.Is(err, steps.ErrDuplicateCall) || !errors.Is(err, errDown) {
		t.Fatalf("second try in the same attempt: %v, want fn's error again", err)
	}

	// The next attempt calls fn again, and that result is the one recorded.
	m.err = nil
	got, err := steps.Call(ctx, attempt(2, j), "damage-model", nil, m.ask("a"))
	must(t, err)
	if n := m.calls.Load(); n != 3 {
		t.Fatalf("fn ran %d times, want 3", n)
	}
	recs := j.records()
	if len(recs) != 1 || string(recs[0].Result) != `{"text":"a #3","tokens":7}` || got.Text != "a #3" {
		t.Fatalf("journal = %+v, got %+v", recs, got)
	}
}

func TestCallDuplicateName(t *testing.T) {
	j, m := newJournal(), &model{}
	s := attempt(1, j)
	_, err := steps.Call(ctx, s, "lookup", 1, m.ask("a"))
	must(t, err)
	_, err = steps.Call(ctx, s, "lookup", 1, m.ask("a"))
	if !errors.Is(err, steps.ErrDuplicateCall) {
		t.Fatalf("same name twice: err = %v, want ErrDuplicateCall", err)
	}
	if n := m.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}

	// A replayed name is used too.
	r := attempt(2, j)
	_, err = steps.Call(ctx, r, "lookup", 1, m.ask("a"))
	must(t, err)
	if _, err = steps.Call(ctx, r, "lookup", 1, m.ask("a")); !errors.Is(err, steps.ErrDuplicateCall) {
		t.Fatalf("replayed name twice: err = %v, want ErrDuplicateCall", err)
	}
	if n := m.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
}

func TestCallConcurrentAttemptWins(t *testing.T) {
	args := prompt{Prompt: "p"}
	winner := checkpoint.CallRecord{Name: "damage-model", ArgsSHA256: argsSum(t, args), Result: json.RawMessage(`{"text":"winner","tokens":1}`), At: time.Unix(1, 0).UTC()}

	// Attempt 2 loaded an empty journal, then a redelivered attempt 3
	// recorded the call while attempt 2's fn was running.
	j, m := newJournal(), &model{}
	s := attempt(2, j)
	_, _ = j.RecordCall(ctx, winner)

	got, err := steps.Call(ctx, s, "damage-model", args, m.ask("loser"))
	must(t, err)
	if want := (answer{Text: "winner", Tokens: 1}); got != want {
		t.Fatalf("Call = %+v, want the winner's %+v", got, want)
	}
	if n := m.calls.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1 (it lost the race, it did run)", n)
	}
	calls := s.Calls()
	if len(calls) != 1 || !calls[0].Replayed || string(calls[0].Result) != string(winner.Result) {
		t.Fatalf("Calls() = %+v, want the winner's record, replayed", calls)
	}
	if recs := j.records(); len(recs) != 1 || !reflect.DeepEqual(recs[0], winner) {
		t.Fatalf("journal = %+v, want only the winner", recs)
	}
}

func TestCallConcurrentAttemptWinsWithOtherArgs(t *testing.T) {
	j, m := newJournal(), &model{}
	s := attempt(2, j)
	_, _ = j.RecordCall(ctx, checkpoint.CallRecord{Name: "damage-model", ArgsSHA256: argsSum(t, "old"), Result: json.RawMessage(`{}`)})
	_, err := steps.Call(ctx, s, "damage-model", "new", m.ask("a"))
	if !errors.Is(err, steps.ErrJournalMismatch) || !s.JournalMismatch() {
		t.Fatalf("winner with other args: err = %v, JournalMismatch() = %v; want ErrJournalMismatch", err, s.JournalMismatch())
	}
}

func TestCallRecorderError(t *testing.T) {
	errStore := errors.New("redis: connection refused")
	j, m := newJournal(), &model{}
	j.err = errStore
	s := attempt(1, j)
	_, err := steps.Call(ctx, s, "pay", nil, m.ask("a"))
	if !errors.Is(err, errStore) {
		t.Fatalf("Call err = %v, want it to wrap the recorder's error", err)
	}
	if !strings.Contains(err.Error(), "journal call pay") {
		t.Fatalf("error %q does not say which call failed to journal", err)
	}
	if len(s.Calls()) != 0 {
		t.Fatalf("Calls() = %+v, want nothing: the call was not journaled", s.Calls())
	}
	// The step's retry calls fn again (the effect must carry the step's
	// idempotency key for this to be safe).
	j.err = nil
	_, err = steps.Call(ctx, attempt(2, j), "pay", nil, m.ask("a"))
	must(t, err)
	if n := m.calls.Load(); n != 2 {
		t.Fatalf("fn ran %d times, want 2", n)
	}
}

func TestCallEncodingErrors(t *testing.T) {
	m := &model{}
	s := attempt(1, newJournal())
	if _, err := steps.Call(ctx, s, "a", make(chan int), m.ask("a")); err == nil || !strings.Contains(err.Error(), "encode args") {
		t.Fatalf("unencodable args: err = %v", err)
	}
	if n := m.calls.Load(); n != 0 {
		t.Fatalf("fn ran with unencodable args")
	}
	_, err := steps.Call(ctx, s, "b", nil, func(context.Context) (func(), error) { return func() {}, nil })
	if err == nil || !strings.Contains(err.Error(), "encode result") {
		t.Fatalf("unencodable result: err = %v", err)
	}
	// A recorded result that no longer decodes into T (the step's code
	// changed the type) is an error, not a silent zero value.
	r := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, Journal: []checkpoint.CallRecord{
		{Name: "c", ArgsSHA256: argsSum(t, nil), Result: json.RawMessage(`"text"`)},
	}})
	if _, err := steps.Call(ctx, r, "c", nil, func(context.Context) (int, error) { return 1, nil }); err == nil || errors.Is(err, steps.ErrJournalMismatch) {
		t.Fatalf("undecodable recorded result: err = %v", err)
	}
}

func TestCallWithoutRecorder(t *testing.T) {
	// Without a Recorder the calls stay in memory: a test of a step can
	// still replay them by hand.
	m := &model{}
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2})
	first, err := steps.Call(ctx, s, "m", "args", m.ask("a"))
	must(t, err)
	r := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, Attempt: 2, Journal: s.Calls()})
	again, err := steps.Call(ctx, r, "m", "args", m.ask("b"))
	must(t, err)
	if first != again || m.calls.Load() != 1 {
		t.Fatalf("first %+v, replay %+v, fn ran %d times", first, again, m.calls.Load())
	}
}

func TestCallConcurrentNames(t *testing.T) {
	j, m := newJournal(), &model{}
	s := attempt(1, j)
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = steps.Call(ctx, s, fmt.Sprintf("tool-%d", i), i, m.ask("t"))
			s.RecordEffect(fmt.Sprintf("key-%d", i), false)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if len(s.Calls()) != n || len(j.records()) != n || len(s.Effects()) != n {
		t.Fatalf("Calls %d, journal %d, effects %d; want %d each", len(s.Calls()), len(j.records()), len(s.Effects()), n)
	}

	// Replayed concurrently on the next attempt: nothing runs again.
	r := attempt(2, j)
	for i := range n {
		wg.Go(func() { _, errs[i] = steps.Call(ctx, r, fmt.Sprintf("tool-%d", i), i, m.ask("t")) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
	}
	if got := m.calls.Load(); got != n {
		t.Fatalf("fn ran %d times, want %d", got, n)
	}
}

func TestCallConcurrentSameName(t *testing.T) {
	// Concurrent Calls with one name: exactly one runs, the others get
	// ErrDuplicateCall rather than a second effect.
	s := attempt(1, newJournal())
	release := make(chan struct{})
	var ran atomic.Int32
	fn := func(context.Context) (int, error) { ran.Add(1); <-release; return 1, nil }
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := steps.Call(ctx, s, "pay", nil, fn)
			errs <- err
		})
	}
	var dups int
	for range n - 1 {
		if err := <-errs; !errors.Is(err, steps.ErrDuplicateCall) {
			t.Errorf("concurrent same-name Call: %v, want ErrDuplicateCall", err)
		}
		dups++
	}
	close(release)
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatalf("the Call that ran: %v", err)
	}
	if ran.Load() != 1 || dups != n-1 {
		t.Fatalf("fn ran %d times, %d duplicates", ran.Load(), dups)
	}
}

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		run     string
		step    int
		attempt int
		key     string
	}{
		{"claim-0042", 6, 1, "claim-0042:step6"},
		{"claim-0042", 6, 2, "claim-0042:step6"},
		{"claim-0042", 6, 17, "claim-0042:step6"},
		{"claim-0042", 7, 1, "claim-0042:step7"},
		{"r", 120, 3, "r:step120"},
	} {
		s := steps.NewContext(steps.ContextConfig{RunID: tc.run, Step: tc.step, Attempt: tc.attempt})
		if got := s.IdempotencyKey(); got != tc.key {
			t.Errorf("IdempotencyKey(%s, step %d, attempt %d) = %q, want %q", tc.run, tc.step, tc.attempt, got, tc.key)
		}
		if got, want := s.Key("refund"), tc.key+":refund"; got != want {
			t.Errorf("Key(refund) = %q, want %q", got, want)
		}
	}
}

func TestContextAccessors(t *testing.T) {
	beats := 0
	s := steps.NewContext(steps.ContextConfig{RunID: "r1", Workflow: "claim", Version: 2, Step: 5, StepName: "approve", Attempt: 3, Heartbeat: func() { beats++ }})
	if s.RunID() != "r1" || s.Workflow() != "claim" || s.Step() != 5 || s.StepName() != "approve" || s.Attempt() != 3 {
		t.Fatalf("accessors: %q %q %d %q %d", s.RunID(), s.Workflow(), s.Step(), s.StepName(), s.Attempt())
	}
	s.Heartbeat()
	s.Heartbeat()
	if beats != 2 {
		t.Fatalf("Heartbeat reached the queue %d times, want 2", beats)
	}
	steps.NewContext(steps.ContextConfig{}).Heartbeat() // no Heartbeat configured: no panic
}

func TestApproval(t *testing.T) {
	payload := map[string]any{"claim": "claim-0042", "amount": 1840}
	sum, err := steps.PayloadSHA256(payload)
	must(t, err)
	changed, err := steps.PayloadSHA256(map[string]any{"claim": "claim-0042", "amount": 1900})
	must(t, err)
	decision := func(by, sha string) checkpoint.Approval {
		return checkpoint.Approval{Step: 5, By: by, Decision: checkpoint.DecisionApproved, Channel: "http", PayloadSHA256: sha}
	}
	req := steps.ApprovalRequest{Payload: payload, Group: "adjusters"}

	for _, tc := range []struct {
		name      string
		approvals []checkpoint.Approval
		wantBy    string // "" means nil
	}{
		{"no decisions", nil, ""},
		{"matching decision", []checkpoint.Approval{decision("ana", sum)}, "ana"},
		{"decision on another payload", []checkpoint.Approval{decision("ana", changed)}, ""},
		{"latest matches", []checkpoint.Approval{decision("ana", changed), decision("bo", sum)}, "bo"},
		{"only an older one matches", []checkpoint.Approval{decision("ana", sum), decision("bo", changed)}, ""},
		{"rejection is a decision too", []checkpoint.Approval{{Step: 5, By: "cy", Decision: checkpoint.DecisionRejected, PayloadSHA256: sum}}, "cy"},
		{"empty hash", []checkpoint.Approval{decision("ana", "")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 5, Approvals: tc.approvals})
			got, err := s.Approval(req)
			must(t, err)
			switch {
			case tc.wantBy == "" && got != nil:
				t.Fatalf("Approval = %+v, want nil", got)
			case tc.wantBy != "" && (got == nil || got.By != tc.wantBy):
				t.Fatalf("Approval = %+v, want the decision by %s", got, tc.wantBy)
			}
		})
	}

	s := steps.NewContext(steps.ContextConfig{Approvals: []checkpoint.Approval{decision("ana", sum)}})
	if _, err := s.Approval(steps.ApprovalRequest{Payload: make(chan int), Group: "g"}); err == nil {
		t.Fatalf("Approval with an unencodable payload: no error")
	}
}

// Approval answers with the latest decision on the payload, as a copy.
func TestApprovalIsTheLatestDecision(t *testing.T) {
	req := steps.ApprovalRequest{Payload: "payout", Group: "g"}
	sum, err := steps.PayloadSHA256(req.Payload)
	must(t, err)
	if d, err := steps.NewContext(steps.ContextConfig{}).Approval(req); d != nil || err != nil {
		t.Fatalf("Approval without decisions = %+v, %v", d, err)
	}
	approvals := []checkpoint.Approval{
		{By: "ana", Decision: checkpoint.DecisionRejected, PayloadSHA256: sum},
		{By: "bo", Decision: checkpoint.DecisionApproved, PayloadSHA256: sum},
	}
	s := steps.NewContext(steps.ContextConfig{Approvals: approvals})
	d, err := s.Approval(req)
	if err != nil || d == nil || d.By != "bo" || !d.Approved() {
		t.Fatalf("Approval = %+v, %v; want the latest (bo, approved)", d, err)
	}
	d.By = "mallory"
	if again, _ := s.Approval(req); again.By != "bo" || approvals[1].By != "bo" {
		t.Fatalf("Approval returned a pointer into the context's approvals")
	}
}

func TestPayloadSHA256(t *testing.T) {
	// Known vector: SHA-256 of the three bytes "abc".
	if got, want := steps.SHA256Hex([]byte("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("SHA256Hex(abc) = %s, want %s", got, want)
	}
	sum, err := steps.PayloadSHA256(map[string]int{"b": 2, "a": 1})
	must(t, err)
	if want := steps.SHA256Hex([]byte(`{"a":1,"b":2}`)); sum != want {
		t.Fatalf("PayloadSHA256 = %s, want the hash of the JSON encoding %s", sum, want)
	}
	// The same facts through another Go type hash the same.
	again, err := steps.PayloadSHA256(struct {
		A int `json:"a"`
		B int `json:"b"`
	}{1, 2})
	must(t, err)
	if again != sum {
		t.Fatalf("equal JSON hashed differently: %s vs %s", again, sum)
	}
	if _, err := steps.PayloadSHA256(func() {}); err == nil {
		t.Fatalf("PayloadSHA256 of a func: no error")
	}
}

func TestEffects(t *testing.T) {
	s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 6})
	if len(s.Effects()) != 0 {
		t.Fatalf("new context has effects")
	}
	s.RecordEffect(s.IdempotencyKey(), false)
	s.RecordEffect(s.Key("refund"), true)
	want := []checkpoint.Effect{{Key: "claim-0042:step6", Replayed: false}, {Key: "claim-0042:step6:refund", Replayed: true}}
	got := s.Effects()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Effects() = %+v, want %+v", got, want)
	}
	got[0].Key = "changed"
	if s.Effects()[0].Key != "claim-0042:step6" {
		t.Fatalf("Effects() returned the context's own slice")
	}
	calls := s.Calls()
	if len(calls) != 0 {
		t.Fatalf("Calls() = %+v, want none", calls)
	}
}
