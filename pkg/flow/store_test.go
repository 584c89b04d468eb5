package flow_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

func TestStore(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{MaxLimits: 3})
	ctx := ctxT(t)

	// The bucket keeps the newest value of each key only.
	kv, err := js.KeyValue(ctx, "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	if status, err := kv.Status(ctx); err != nil || status.History() != 1 {
		t.Fatalf("bucket history %v, %v", status, err)
	}

	r := flow.Rate{N: 10, Per: time.Second, Burst: 5}
	before := time.Now()
	got, err := st.Set(ctx, "anthropic", r, "ana")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "anthropic" || got.Rate != r || got.SetBy != "ana" || got.SetAt.Before(before.Add(-time.Second)) || !got.BlockedUntil.IsZero() {
		t.Errorf("set %+v", got)
	}
	if again, err := st.Get(ctx, "anthropic"); err != nil || again != got {
		t.Errorf("get %+v, %v; want %+v", again, err, got)
	}

	// Setting the same rate writes nothing and keeps who set it.
	rev := revision(t, js, "anthropic")
	if same, err := st.Set(ctx, "anthropic", r, "bo"); err != nil || same.SetBy != "ana" || revision(t, js, "anthropic") != rev {
		t.Errorf("same rate again: %+v, %v", same, err)
	}
	r2 := flow.Rate{N: 600, Per: time.Minute, Burst: 20}
	if changed, err := st.Set(ctx, "anthropic", r2, "bo"); err != nil || changed.Rate != r2 || changed.SetBy != "bo" {
		t.Errorf("changed: %+v, %v", changed, err)
	}

	// The bound counts every name: limits set and slow-downs alike.
	set(t, st, "payments-api", r)
	if err := st.SlowDown(ctx, "openai.gpt-5", at(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Set(ctx, "model", r, "cy"); !errors.Is(err, flow.ErrTooMany) {
		t.Errorf("set past MaxLimits: %v", err)
	}
	if err := st.SlowDown(ctx, "other", at(time.Second)); !errors.Is(err, flow.ErrTooMany) {
		t.Errorf("slow down past MaxLimits: %v", err)
	}
	// An existing name is no new one.
	if _, err := st.Set(ctx, "payments-api", r2, "cy"); err != nil {
		t.Errorf("change at MaxLimits: %v", err)
	}
	if names := listNames(t, st); names != "anthropic,openai.gpt-5,payments-api" {
		t.Errorf("list %s", names)
	}

	// Delete frees the name and the room.
	if err := st.Delete(ctx, "payments-api"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "payments-api"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, err := st.Get(ctx, "payments-api"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
	if wait, err := st.Take(ctx, "payments-api", t0); wait != 0 || err != nil {
		t.Errorf("take deleted: %s, %v", wait, err)
	}
	set(t, st, "model", r)
	if names := listNames(t, st); names != "anthropic,model,openai.gpt-5" {
		t.Errorf("list after delete %s", names)
	}
}

// List reads every limit the bound lets in, in one pass.
func TestListBound(t *testing.T) {
	const n = 1000 // the default bound
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	ctx := ctxT(t)
	r := flow.Rate{N: 1, Per: time.Second, Burst: 1}
	// Filled by hand: Set counts the names before a new one, which makes
	// filling quadratic.
	kv, err := js.KeyValue(ctx, "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := kv.Put(ctx, fmt.Sprintf("l.l%04d", i), []byte(`{"n":1,"per":"1s","burst":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.List(ctx)
	if err != nil || len(all) != n || all[0].Name != "l0000" || all[n-1].Name != "l0999" || all[7].Rate != r {
		t.Fatalf("list of %d: %d, %v", n, len(all), err)
	}
	if _, err := st.Set(ctx, "one-more", r, "x"); !errors.Is(err, flow.ErrTooMany) || !strings.Contains(err.Error(), "at most 1000") {
		t.Errorf("set past the default bound: %v", err)
	}
}

func TestBadInputs(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	ctx := ctxT(t)
	r := flow.Rate{N: 10, Per: time.Second, Burst: 5}
	for _, name := range []string{"", ".a", "a.", "a..b", "a b", "a/b", "a*", "a>", "ä", strings.Repeat("x", 65)} {
		if _, err := st.Set(ctx, name, r, "x"); !errors.Is(err, flow.ErrBadLimit) || !strings.Contains(err.Error(), "limit name") {
			t.Errorf("set %q: %v", name, err)
		}
		if _, err := st.Take(ctx, name, t0); !errors.Is(err, flow.ErrBadLimit) {
			t.Errorf("take %q: %v", name, err)
		}
		if err := st.SlowDown(ctx, name, at(time.Second)); !errors.Is(err, flow.ErrBadLimit) {
			t.Errorf("slow down %q: %v", name, err)
		}
		if _, err := st.Get(ctx, name); !errors.Is(err, flow.ErrBadLimit) {
			t.Errorf("get %q: %v", name, err)
		}
		if err := st.Delete(ctx, name); !errors.Is(err, flow.ErrBadLimit) {
			t.Errorf("delete %q: %v", name, err)
		}
	}
	for _, name := range []string{"a", "A-b_c.9", strings.Repeat("x", 64)} {
		if _, err := st.Set(ctx, name, r, "x"); err != nil {
			t.Errorf("set %q: %v", name, err)
		}
	}
	_, err := st.Set(ctx, "model", flow.Rate{N: 10, Per: time.Second}, "x")
	if !errors.Is(err, flow.ErrBadLimit) || err.Error() != "limit model: burst 0: use 1 to 1000000" {
		t.Errorf("set a bad rate: %v", err)
	}
	if err := st.SlowDown(ctx, "model", time.Time{}); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("slow down with no end: %v", err)
	}
	if _, err := flow.NewStore(ctx, js, flow.StoreOptions{MaxLimits: -1}); err == nil {
		t.Error("NewStore took MaxLimits -1")
	}

	// A record that is not one (written by hand) is an error, not a panic
	// or a silent pass.
	kv, err := js.KeyValue(ctx, "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, junk := range []string{"{", `{"n": 10, "per": "soon", "burst": 1}`, `{"n": 10, "per": "1s", "burst": 0}`} {
		if _, err := kv.Put(ctx, "l.junk", []byte(junk)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Take(ctx, "junk", t0); err == nil || !strings.Contains(err.Error(), "decode limit junk") {
			t.Errorf("take of %s: %v", junk, err)
		}
		if _, err := st.List(ctx); err == nil {
			t.Errorf("list with %s: no error", junk)
		}
	}
}

func listNames(t *testing.T, st *flow.Store) string {
	t.Helper()
	all, err := st.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(all))
	for i, l := range all {
		names[i] = l.Name
	}
	return strings.Join(names, ",")
}
