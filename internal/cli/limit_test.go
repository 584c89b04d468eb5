package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/flow"
)

// limitJSON is `durable limit get --json`'s record.
type limitJSON struct {
	Name            string    `json:"name"`
	Rate            string    `json:"rate"`
	Burst           int       `json:"burst"`
	SlowedDownUntil time.Time `json:"slowed_down_until"`
	SetBy           string    `json:"set_by"`
	Concurrency     int       `json:"concurrency"`
	PerKey          int       `json:"concurrency_per_key"`
	RatePerKey      string    `json:"rate_per_key"`
	BurstPerKey     int       `json:"burst_per_key"`
	Keys            []struct {
		Key       string `json:"key"`
		SlotsHeld int    `json:"slots_held"`
		Holders   int    `json:"holders"`
	} `json:"keys"`
}

// `durable limit`: bad input exits 2 naming the flag and value, an
// unknown name 3; a limit is set, listed with the slow-down in effect,
// read, changed and deleted. The limits live in NATS whatever the
// checkpoint store, so one store is enough.
func TestLimitCommands(t *testing.T) {
	e := newEnv(t, "kv")
	for _, bad := range []struct {
		args  []string
		names string
	}{
		{[]string{"model"}, "--rate"},
		{[]string{"model", "--rate", "10/d"}, `--rate: rate "10/d"`},
		{[]string{"model", "--rate", "ten/s"}, `"ten"`},
		{[]string{"model", "--rate", "10/s", "--burst", "0"}, "--burst 0"},
		{[]string{"a..b", "--rate", "10/s"}, `limit name "a..b"`},
		{[]string{"--rate", "10/s"}, "NAME"},
		{[]string{"model", "--concurrency", "-3"}, "--concurrency -3"},
		{[]string{"model", "--concurrency", "3", "--burst", "4"}, "--burst 4 without --rate"},
		{[]string{"model", "--concurrency", "2000000"}, "--concurrency 2000000"},
		{[]string{"model", "--concurrency-per-key", "-1"}, "--concurrency-per-key -1"},
		{[]string{"model", "--concurrency-per-key", "2000000"}, "--concurrency-per-key 2000000"},
		{[]string{"model", "--rate-per-key", "10/d"}, "--rate-per-key"},
		{[]string{"model", "--rate", "1/s", "--burst-per-key", "4"}, "--burst-per-key 4 without --rate-per-key"},
		{[]string{"model", "--burst-per-key", "3"}, "--burst-per-key 3 without --rate-per-key"},
		{[]string{"model", "--burst", "3"}, "--burst 3 without --rate"},
		// A 0 given is refused, not ignored beside another flag.
		{[]string{"model", "--concurrency", "3", "--concurrency-per-key", "0"}, "--concurrency-per-key 0"},
		{[]string{"model", "--rate", "1/s", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"bad name!", "--concurrency", "2"}, `limit name "bad name!"`},
	} {
		args := append([]string{"limit", "set"}, bad.args...)
		if r := e.cli(args...); r.code != 2 || !strings.Contains(r.stderr, bad.names) {
			t.Errorf("durable %s: want exit 2 naming %s, got %s", strings.Join(args, " "), bad.names, r)
		}
	}
	for _, sub := range []string{"get", "delete"} {
		if r := e.cli("limit", sub, "no-such-limit"); r.code != 3 || !strings.Contains(r.stderr, "no-such-limit") {
			t.Errorf("limit %s of an unknown name: want exit 3 naming it, got %s", sub, r)
		}
		// A bad name is refused once, before connecting.
		if r := e.cli("limit", sub, "bad name!"); r.code != 2 || strings.Count(r.stderr, `"bad name!"`) != 1 {
			t.Errorf("limit %s of a bad name: want exit 2 naming it once, got %s", sub, r)
		}
	}
	if r := e.cli("limit", "delete", "model", "--only", "slots"); r.code != 2 || !strings.Contains(r.stderr, `--only "slots"`) {
		t.Errorf("limit delete --only slots: want exit 2 naming it, got %s", r)
	}

	var got limitJSON
	r := e.mustCLI(0, "limit", "set", "model", "--rate", "10/s", "--burst", "5", "--by", "ana", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Name != "model" || got.Rate != "10/s" || got.Burst != 5 || got.SetBy != "ana" {
		t.Fatalf("limit set --json: %v\n%s", err, r.stdout)
	}
	if r := e.mustCLI(0, "limit", "set", "model", "--rate", "600/m"); !strings.Contains(r.stdout, "600/m burst 1") {
		t.Errorf("limit set of a new rate: %s", r)
	}
	// A provider's 429 seen by a worker: the list shows the slow-down.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := flow.NewStore(ctx, e.js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	if err := st.SlowDown(ctx, "model", until); err != nil {
		t.Fatal(err)
	}
	if err := st.SlowDown(ctx, "unlimited-api", until); err != nil {
		t.Fatal(err)
	}
	var listed []limitJSON
	if err := json.Unmarshal([]byte(e.mustCLI(0, "limit", "list", "--json").stdout), &listed); err != nil || len(listed) != 2 ||
		listed[0].Name != "model" || listed[0].Rate != "600/m" || listed[0].SlowedDownUntil.IsZero() ||
		listed[1].Name != "unlimited-api" || listed[1].Rate != "" || listed[1].SlowedDownUntil.IsZero() {
		t.Fatalf("limit list --json: %v %+v", err, listed)
	}
	text := e.mustCLI(0, "limit", "list").stdout
	for _, want := range []string{"NAME", "RATE", "BURST", "SLOWED DOWN UNTIL", "model", "600/m", "unlimited-api", "left)"} {
		if !strings.Contains(text, want) {
			t.Errorf("limit list does not show %q:\n%s", want, text)
		}
	}
	if r := e.mustCLI(0, "limit", "get", "model"); !strings.Contains(r.stdout, "600/m burst 1, slowed down until") {
		t.Errorf("limit get: %s", r)
	}
	limitConcurrency(t, e)
	limitPerKey(t, e, st)
	e.mustCLI(0, "limit", "delete", "model")
	if r := e.cli("limit", "get", "model"); r.code != 3 {
		t.Errorf("limit get after delete: want exit 3, got %s", r)
	}
}

// limitConcurrency: a concurrency limit joins model's rate, and one is
// set alone on db; list and get show them; delete removes db's.
func limitConcurrency(t *testing.T, e *env) {
	var got limitJSON
	r := e.mustCLI(0, "limit", "set", "model", "--concurrency", "5", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Concurrency != 5 || got.Rate != "600/m" {
		t.Fatalf("limit set --concurrency --json: %v\n%s", err, r.stdout)
	}
	if r := e.mustCLI(0, "limit", "set", "db", "--concurrency", "2"); !strings.Contains(r.stdout, "no rate set, 2 at once (0 slots held by 0 workers)") {
		t.Errorf("limit set db --concurrency 2: %s", r)
	}
	text := e.mustCLI(0, "limit", "list").stdout
	for _, want := range []string{"CONCURRENCY", "SLOTS HELD", "db", "0 by 0 workers"} {
		if !strings.Contains(text, want) {
			t.Errorf("limit list does not show %q:\n%s", want, text)
		}
	}
	var listed []limitJSON
	if err := json.Unmarshal([]byte(e.mustCLI(0, "limit", "list", "--json").stdout), &listed); err != nil || len(listed) != 3 ||
		listed[0].Name != "db" || listed[0].Concurrency != 2 || listed[1].Name != "model" || listed[1].Concurrency != 5 {
		t.Fatalf("limit list --json: %v %+v", err, listed)
	}
	if r := e.mustCLI(0, "limit", "get", "model"); !strings.Contains(r.stdout, "5 at once") {
		t.Errorf("limit get: %s", r)
	}
	e.mustCLI(0, "limit", "delete", "db")
	if r := e.cli("limit", "get", "db"); r.code != 3 {
		t.Errorf("limit get db after delete: want exit 3, got %s", r)
	}
}

// limitPerKey: a per-key limit is set alone on tenantapi; get shows the
// keys a worker's pool holds (a pool leases a slot ahead of a caller
// that finds none, so it may hold 2 for its 1 in use), list the per-key
// column, and delete removes it.
func limitPerKey(t *testing.T, e *env, st *flow.Store) {
	var got limitJSON
	r := e.mustCLI(0, "limit", "set", "tenantapi", "--concurrency-per-key", "2", "--by", "bo", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.PerKey != 2 || got.Concurrency != 0 || got.SetBy != "bo" || len(got.Keys) != 0 {
		t.Fatalf("limit set --concurrency-per-key --json: %v\n%s", err, r.stdout)
	}
	if r := e.mustCLI(0, "limit", "get", "tenantapi"); !strings.Contains(r.stdout, "no rate set, 2 at once per key (no key busy)") {
		t.Errorf("limit get tenantapi: %s", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := flow.NewPool(ctx, st, flow.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got2 := make(chan *flow.Slot, 1)
	s, _ := p.Acquire("tenantapi", flow.Queue{Key: "acme corp"}, func(s *flow.Slot) { got2 <- s })
	if s == nil {
		s = <-got2
	}
	defer s.Release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = e.mustCLI(0, "limit", "get", "tenantapi", "--json")
		got = limitJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &got); err == nil && len(got.Keys) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got.Keys) != 1 || got.Keys[0].Key != "acme corp" || got.Keys[0].SlotsHeld < 1 || got.Keys[0].Holders != 1 {
		t.Fatalf("limit get --json with a key busy: %s", r.stdout)
	}
	if r := e.mustCLI(0, "limit", "get", "tenantapi"); !strings.Contains(r.stdout, `2 at once per key (1 key busy: "acme corp" `) {
		t.Errorf("limit get tenantapi with a key busy: %s", r)
	}
	r = e.mustCLI(0, "limit", "set", "tenantapi", "--rate-per-key", "2/s", "--burst-per-key", "3", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.RatePerKey != "2/s" || got.BurstPerKey != 3 || got.PerKey != 2 || got.Rate != "" {
		t.Fatalf("limit set --rate-per-key --json: %v\n%s", err, r.stdout)
	}
	if r := e.mustCLI(0, "limit", "get", "tenantapi"); !strings.Contains(r.stdout, "2/s burst 3 per key") {
		t.Errorf("limit get tenantapi with a rate per key: %s", r)
	}
	if text := e.mustCLI(0, "limit", "list").stdout; !strings.Contains(text, "PER KEY") || !strings.Contains(text, "2 at once, 2/s burst 3") {
		t.Errorf("limit list does not show tenantapi's per-key limits:\n%s", text)
	}
	// One kind removed, the others kept.
	e.mustCLI(0, "limit", "delete", "tenantapi", "--only", "rate-per-key")
	r = e.mustCLI(0, "limit", "get", "tenantapi", "--json")
	got = limitJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.RatePerKey != "" || got.PerKey != 2 {
		t.Errorf("limit get after delete --only rate-per-key: %v\n%s", err, r.stdout)
	}
	e.mustCLI(0, "limit", "delete", "tenantapi")
	if r := e.cli("limit", "get", "tenantapi"); r.code != 3 {
		t.Errorf("limit get tenantapi after delete: want exit 3, got %s", r)
	}
}
