//go:build upgradegen

package upgrade

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
)

var out = flag.String("out", "", "directory to write the fixtures' data into (<out>/<store>/nats, <out>/redis/redis)")

// TestWriteFixtures writes the fixtures' data with the code of the
// checkout it runs in: every run of Runs stopped where the package doc
// says. testdata/README.md says how to run it at an earlier release.
func TestWriteFixtures(t *testing.T) {
	if *out == "" {
		t.Skip("-out not set")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			f := deploy(t, kind, filepath.Join(*out, kind))
			ctx := context.Background()
			ledger := &Ledger{}
			// The sleeper's wake is long past when the fixtures are read.
			reg := Workflows(ledger, true, time.Now().Add(2*time.Second))
			_, stop := f.StartWorker(reg, nil)
			for _, id := range Runs[1 : len(Runs)-1] {
				f.Start(id, id, `{"amount":100}`)
			}
			f.Start(RunDead, RunRedriven, `{"amount":100}`)
			f.WaitStatus(RunRedriven, checkpoint.StatusDead, 20*time.Second)
			if _, err := f.Client.Redrive(ctx, RunRedriven, "oncall"); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 20*time.Second, "dead again after its redrive", func() bool {
				run, err := f.Store.GetRun(ctx, RunRedriven)
				return err == nil && run.Status == checkpoint.StatusDead && run.Redrives == 1
			})
			f.WaitStatus(RunApproval, checkpoint.StatusWaiting, 20*time.Second)
			f.WaitStatus(RunSignal, checkpoint.StatusWaiting, 20*time.Second)
			f.WaitStatus(RunKid, checkpoint.StatusWaiting, 20*time.Second)
			f.WaitStatus(RunChildren, checkpoint.StatusWaiting, 20*time.Second)
			f.WaitStatus(RunSleep, checkpoint.StatusWaiting, 20*time.Second)
			f.WaitStatus(RunDead, checkpoint.StatusDead, 20*time.Second)
			stop()
			// With no worker running, the queued run's first step stays
			// on the stream (its workflow is registered in the store).
			f.Start(RunQueued, RunQueued, `{"amount":1}`)
			// The streams keep what they hold for ever: the fixtures are
			// read long after the steps' seven days of MaxAge, and a
			// worker leaves an existing stream's settings alone.
			for _, name := range []string{"DURABLE_STEPS", "DURABLE_DLQ", "DURABLE_EVENTS"} {
				st, err := f.JS.Stream(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				cfg := st.CachedInfo().Config
				cfg.MaxAge = 0
				if _, err := f.JS.UpdateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			if f.Redis != nil {
				if err := f.Redis.Save(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s: payments %v, steps entered %v", kind, ledger.Keys(), ledger.Entered())
		})
	}
}
