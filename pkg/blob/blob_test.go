package blob_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/blobtest"
	"github.com/durable-run/durable/pkg/checkpoint"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return blob.NewMemory("mem") })
}

func TestObjectName(t *testing.T) {
	d := blob.Digest([]byte("hello"))
	cases := []struct {
		run, name string
		want      string
		ok        bool
	}{
		{"claim-0042", "claim-form.pdf", "claim-0042/3/claim-form.pdf/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", true},
		{"claim-0042", "pages/1.png", "claim-0042/3/pages/1.png/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", true},
		{"claim-0042", "", "", false},
		{"claim-0042", "a b", "", false},
		{"claim-0042", "/abs", "", false},
		{"claim-0042", "a//b", "", false},
		{"claim-0042", "../up", "", false},
		{"claim-0042", "trailing/", "", false},
		{"claim-0042", strings.Repeat("x", 201), "", false},
		{"bad.run", "doc", "", false},
	}
	for _, c := range cases {
		got, err := blob.ObjectName(c.run, 3, c.name, d)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("ObjectName(%q, 3, %q) = %q, %v", c.run, c.name, got, err)
		}
	}
	if _, err := blob.ObjectName("r", 1, "doc", "MD5=abc"); err == nil {
		t.Error("a digest that is not SHA-256 must be refused")
	}
	if blob.RunOf("claim-0042/3/doc/ab") != "claim-0042" || blob.RunOf("nofolder") != "" || blob.RunOf("bad.id/1/x") != "" {
		t.Error("RunOf")
	}
}

func TestDigestIsTheObjectStoreFormat(t *testing.T) {
	// echo -n hello | sha256sum | xxd -r -p | base64 | tr '+/' '-_'
	if got := blob.Digest([]byte("hello")); got != "SHA-256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=" {
		t.Fatal(got)
	}
}

// runs is a checkpoint store's GetRun over a map.
type runs map[string]checkpoint.Run

func (r runs) GetRun(_ context.Context, id string) (checkpoint.Run, error) {
	if run, ok := r[id]; ok {
		return run, nil
	}
	return checkpoint.Run{}, checkpoint.ErrNotFound
}

func TestRetentionSweep(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	keep := 7 * 24 * time.Hour
	old, recent := now.Add(-keep-time.Hour), now.Add(-keep+time.Hour)
	rs := runs{
		"done-old":      {ID: "done-old", Status: checkpoint.StatusCompleted, UpdatedAt: old},
		"failed-old":    {ID: "failed-old", Status: checkpoint.StatusFailed, UpdatedAt: old},
		"cancelled-old": {ID: "cancelled-old", Status: checkpoint.StatusCancelled, UpdatedAt: old},
		"dead-old":      {ID: "dead-old", Status: checkpoint.StatusDead, UpdatedAt: old},
		"done-recent":   {ID: "done-recent", Status: checkpoint.StatusCompleted, UpdatedAt: recent},
		"running-old":   {ID: "running-old", Status: checkpoint.StatusRunning, UpdatedAt: old},
		"waiting-old":   {ID: "waiting-old", Status: checkpoint.StatusWaiting, UpdatedAt: old},
	}
	m := blob.NewMemory("mem")
	put := func(name string, mod time.Time) {
		t.Helper()
		if _, err := m.Put(ctx, name, []byte(name)); err != nil {
			t.Fatal(err)
		}
		m.SetModTime(name, mod)
	}
	for id := range rs {
		put(id+"/1/doc/aa", old)
		put(id+"/2/shot/bb", old)
	}
	put("gone-old/1/doc/aa", old)       // its run was deleted long ago
	put("gone-recent/1/doc/aa", old)    // deleted, but one blob is young
	put("gone-recent/2/doc/aa", recent) //
	put("not-a-step-blob", old)         // not ours: left alone

	res, err := blob.Retention{Blobs: m, Runs: rs, After: keep, Now: func() time.Time { return now }}.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left, _ := m.List(ctx, "")
	var names []string
	for _, in := range left {
		names = append(names, in.Name)
	}
	want := map[string]bool{
		"done-recent/1/doc/aa": true, "done-recent/2/shot/bb": true,
		"running-old/1/doc/aa": true, "running-old/2/shot/bb": true,
		"waiting-old/1/doc/aa": true, "waiting-old/2/shot/bb": true,
		"gone-recent/1/doc/aa": true, "gone-recent/2/doc/aa": true,
		"not-a-step-blob": true,
	}
	if len(names) != len(want) {
		t.Fatalf("left %v", names)
	}
	for _, n := range names {
		if !want[n] {
			t.Errorf("%s should have been deleted", n)
		}
	}
	if res.Runs != 5 || res.Objects != 9 || res.Kept != 4 {
		t.Errorf("result %+v, want 5 runs and 9 objects deleted, 4 runs kept", res)
	}

	// A second sweep finds nothing more to do.
	res, err = blob.Retention{Blobs: m, Runs: rs, After: keep, Now: func() time.Time { return now }}.Sweep(ctx)
	if err != nil || res.Objects != 0 {
		t.Fatalf("second sweep: %+v %v", res, err)
	}
}

func TestRetentionConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := (blob.Retention{Blobs: blob.NewMemory("m"), Runs: runs{}}).Sweep(ctx); err == nil {
		t.Error("After 0 must be refused")
	}
	if _, err := (blob.Retention{After: time.Hour}).Sweep(ctx); err == nil {
		t.Error("missing stores must be refused")
	}
}

// A store failure for one run does not stop the sweep of the others.
func TestRetentionGoesOnPastAFailingRun(t *testing.T) {
	ctx := context.Background()
	m := blob.NewMemory("m")
	for _, n := range []string{"a/1/x", "b/1/x"} {
		if _, err := m.Put(ctx, n, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("store down")
	r := failingRuns{fail: "a", err: boom, runs: runs{"b": {ID: "b", Status: checkpoint.StatusCompleted, UpdatedAt: time.Now().Add(-2 * time.Hour)}}}
	res, err := blob.Retention{Blobs: m, Runs: r, After: time.Hour}.Sweep(ctx)
	if !errors.Is(err, boom) || res.Objects != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

type failingRuns struct {
	fail string
	err  error
	runs runs
}

func (f failingRuns) GetRun(ctx context.Context, id string) (checkpoint.Run, error) {
	if id == f.fail {
		return checkpoint.Run{}, f.err
	}
	return f.runs.GetRun(ctx, id)
}
