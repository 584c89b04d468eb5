package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/schedule"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The embedded nats-server and go-redis keep background goroutines
		// that end shortly after their owners are closed.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// clock is a test's time, which it moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(at string) *clock { return &clock{now: utc(at)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = at
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore opens a store on js with the clock.
func newStore(t *testing.T, js jetstream.JetStream, c *clock, opts schedule.StoreOptions) *schedule.Store {
	t.Helper()
	s, err := schedule.NewStore(ctxT(t), js, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.SetClock(c.Now)
	return s
}

func TestStore(t *testing.T) {
	_, js := testenv.StartNATS(t).Connect(t)
	c := newClock("2026-12-04T10:00:00Z")
	st := newStore(t, js, c, schedule.StoreOptions{MaxSchedules: 3})
	ctx := ctxT(t)

	// The bucket keeps the newest value of each key only.
	kv, err := js.KeyValue(ctx, "durable_schedules")
	if err != nil {
		t.Fatal(err)
	}
	if status, err := kv.Status(ctx); err != nil || status.History() != 1 {
		t.Fatalf("bucket history %v, %v", status, err)
	}

	created, err := st.Create(ctx, schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *", Input: json.RawMessage(`{ "full": true }`)}, "ana")
	if err != nil {
		t.Fatal(err)
	}
	// Stored with the defaults spelled out and the input compact.
	want := schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *", TimeZone: "UTC", Input: json.RawMessage(`{"full":true}`),
		Overlap: schedule.OverlapSkip, CatchUp: schedule.CatchUpLast, CatchUpWindow: schedule.DefaultCatchUpWindow}
	got, err := st.Get(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if !specEqual(got.Spec, want) || !specEqual(created.Spec, want) {
		t.Errorf("stored %+v\nwant %+v", got.Spec, want)
	}
	if got.CreatedBy != "ana" || !got.CreatedAt.Equal(c.Now()) || !got.ActiveSince.Equal(c.Now()) || got.UpdatedBy != "ana" {
		t.Errorf("stored %+v", got)
	}
	if next := got.NextFire(c.Now()); !next.Equal(utc("2026-12-05T02:00:00Z")) {
		t.Errorf("next fire %s", next)
	}

	if _, err := st.Create(ctx, schedule.Spec{Name: "nightly", Workflow: "other", Cron: "@hourly"}, "bo"); !errors.Is(err, schedule.ErrExists) {
		t.Errorf("second create: %v", err)
	}
	if _, err := st.Create(ctx, schedule.Spec{Name: "bad", Workflow: "w", Cron: "0 2 * * *", TimeZone: "Mars/Base"}, "bo"); !errors.Is(err, schedule.ErrBadSpec) {
		t.Errorf("bad spec: %v", err)
	}
	for _, name := range []string{"missing", "bad.name", ""} {
		if _, err := st.Get(ctx, name); !errors.Is(err, schedule.ErrNotFound) {
			t.Errorf("get %q: %v", name, err)
		}
	}
	for _, name := range []string{"b", "a"} {
		if _, err := st.Create(ctx, schedule.Spec{Name: name, Workflow: "w", Cron: "@hourly"}, "bo"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Create(ctx, schedule.Spec{Name: "d", Workflow: "w", Cron: "@hourly"}, "bo"); !errors.Is(err, schedule.ErrTooMany) {
		t.Errorf("create past MaxSchedules: %v", err)
	}
	if names := listNames(t, st); names != "a,b,nightly" {
		t.Errorf("list %s", names)
	}

	// Delete frees the name at once; the store has room again.
	if err := st.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "b"); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, err := st.Get(ctx, "b"); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
	if names := listNames(t, st); names != "a,nightly" {
		t.Errorf("list after delete %s", names)
	}
	if _, err := st.Create(ctx, schedule.Spec{Name: "b", Workflow: "w2", Cron: "@daily"}, "cy"); err != nil {
		t.Fatalf("create again after delete: %v", err)
	}
	if got, _ := st.Get(ctx, "b"); got.Spec.Workflow != "w2" || got.CreatedBy != "cy" {
		t.Errorf("recreated %+v", got)
	}
}

// Pause and resume record who and when; a resume owes nothing from
// before it; doing either twice changes nothing.
func TestPauseResume(t *testing.T) {
	_, js := testenv.StartNATS(t).Connect(t)
	c := newClock("2026-12-04T10:00:00Z")
	st := newStore(t, js, c, schedule.StoreOptions{})
	ctx := ctxT(t)
	if _, err := st.Create(ctx, schedule.Spec{Name: "h", Workflow: "w", Cron: "0 * * * *", CatchUp: schedule.CatchUpAll}, "ana"); err != nil {
		t.Fatal(err)
	}
	c.Set(utc("2026-12-04T10:20:00Z"))
	p, err := st.Pause(ctx, "h", "bo")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Spec.Paused || p.UpdatedBy != "bo" || !p.UpdatedAt.Equal(c.Now()) {
		t.Errorf("paused %+v", p)
	}
	if due := p.Due(utc("2026-12-04T13:30:00Z")); due != nil {
		t.Errorf("due while paused %v", due)
	}
	c.Set(utc("2026-12-04T10:30:00Z"))
	if again, err := st.Pause(ctx, "h", "cy"); err != nil || again.UpdatedBy != "bo" {
		t.Errorf("second pause %+v, %v", again, err)
	}
	c.Set(utc("2026-12-04T12:30:00Z"))
	r, err := st.Resume(ctx, "h", "cy")
	if err != nil {
		t.Fatal(err)
	}
	if r.Spec.Paused || r.UpdatedBy != "cy" || !r.ActiveSince.Equal(c.Now()) {
		t.Errorf("resumed %+v", r)
	}
	// 11:00 and 12:00 passed while paused: not owed, though CatchUpAll.
	if due := r.Due(utc("2026-12-04T13:30:00Z")); len(due) != 1 || !due[0].Equal(utc("2026-12-04T13:00:00Z")) {
		t.Errorf("due after resume %v", due)
	}
	c.Set(utc("2026-12-04T12:40:00Z"))
	if again, err := st.Resume(ctx, "h", "dan"); err != nil || again.UpdatedBy != "cy" || !again.ActiveSince.Equal(r.ActiveSince) {
		t.Errorf("second resume %+v, %v", again, err)
	}
	for _, op := range []func(context.Context, string, string) (schedule.Schedule, error){st.Pause, st.Resume} {
		if _, err := op(ctx, "missing", "x"); !errors.Is(err, schedule.ErrNotFound) {
			t.Errorf("on a missing schedule: %v", err)
		}
	}
}

// Pauses and resumes at once from many stores: compare-and-set, none
// lost, and the record stays whole.
func TestStoreConcurrentChanges(t *testing.T) {
	srv := testenv.StartNATS(t)
	c := newClock("2026-12-04T10:00:00Z")
	_, js := srv.Connect(t)
	first := newStore(t, js, c, schedule.StoreOptions{})
	ctx := ctxT(t)
	if _, err := first.Create(ctx, schedule.Spec{Name: "h", Workflow: "w", Cron: "@hourly"}, "ana"); err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		_, js := srv.Connect(t)
		st := newStore(t, js, c, schedule.StoreOptions{})
		wg.Go(func() {
			for j := range 20 {
				op := st.Pause
				if (i+j)%2 == 1 {
					op = st.Resume
				}
				if _, err := op(ctx, "h", "x"); err != nil {
					t.Error(err)
					return
				}
				changes.Add(1)
			}
		})
	}
	wg.Wait()
	got, err := first.Get(ctx, "h")
	if err != nil || got.Spec.Cron != "@hourly" || got.CreatedBy != "ana" {
		t.Errorf("after %d changes: %+v, %v", changes.Load(), got, err)
	}
}

func listNames(t *testing.T, st *schedule.Store) string {
	t.Helper()
	all, err := st.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for i, sch := range all {
		if i > 0 {
			s += ","
		}
		s += sch.Spec.Name
	}
	return s
}

func specEqual(a, b schedule.Spec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
