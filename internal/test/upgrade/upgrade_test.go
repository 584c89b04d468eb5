package upgrade

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// fixtureRelease is the commit whose code wrote the fixtures: the last
// before issue 26, the release this one upgrades from.
const fixtureRelease = "2750fbb"

// The runs that release stored, waiting for an approval, for a signal,
// for a child, sleeping, dead in the DLQ, and one not yet taken by any
// worker, go on under this release and finish, and every payment is
// taken once: the steps that release committed are not run again, and
// the steps after them run once.
func TestRunsOfThePreviousReleaseFinish(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			untar(t, filepath.Join("testdata", fixtureRelease+"-"+kind+".tar.gz"), dir)
			f := deploy(t, kind, dir)
			ctx := context.Background()

			// As that release left them.
			want := map[string]checkpoint.Status{
				RunQueued: checkpoint.StatusRunning, RunApproval: checkpoint.StatusWaiting, RunSignal: checkpoint.StatusWaiting,
				RunChildren: checkpoint.StatusWaiting, RunKid: checkpoint.StatusWaiting, RunSleep: checkpoint.StatusWaiting, RunDead: checkpoint.StatusDead,
				RunRedriven: checkpoint.StatusDead,
			}
			before := map[string]string{} // each run's checkpoints as that release wrote them
			for id, status := range want {
				run, err := f.Store.GetRun(ctx, id)
				if err != nil {
					t.Fatalf("the fixture's run %s: %v", id, err)
				}
				if run.Status != status {
					t.Fatalf("the fixture's run %s is %s, want %s", id, run.Status, status)
				}
				before[id] = checkpoints(t, f, id)
			}

			// The queued run's first step, as that release published it,
			// is still on the stream (the fixture's streams have no
			// MaxAge; see gen_test.go).
			steps, err := f.JS.Stream(ctx, queue.StepStream)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := steps.GetLastMsgForSubject(ctx, queue.StepSubject(RunQueued, RunQueued)); err != nil {
				t.Fatalf("the fixture's step message of %s: %v (fixtures written with a MaxAge on the step stream expire: write them again, testdata/README.md)", RunQueued, err)
			}

			ledger := &Ledger{}
			f.StartWorker(Workflows(ledger, false, time.Now()), nil)
			f.StartScheduler(nil) // wakes the sleeper
			decide := func(id string) {
				t.Helper()
				if _, err := f.Client.Decide(ctx, client.Decision{RunID: id, By: "ann", Channel: client.ChannelCLI}); err != nil {
					t.Fatalf("decide %s: %v", id, err)
				}
			}
			decide(RunApproval)
			decide(RunKid)
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: RunSignal, Name: "docs", Data: json.RawMessage(`"scan.pdf"`), By: "bot", Channel: client.ChannelAPI}); err != nil {
				t.Fatalf("signal: %v", err)
			}
			for _, id := range []string{RunDead, RunRedriven} {
				if _, err := f.Client.Redrive(ctx, id, "oncall"); err != nil {
					t.Fatalf("redrive %s: %v", id, err)
				}
			}
			for id := range want {
				f.WaitStatus(id, checkpoint.StatusCompleted, 30*time.Second)
			}

			// Each deposit that release took is not taken again; each
			// settlement is taken once, by this release.
			paid := map[string]int{
				RunQueued + ":step1:deposit": 1, RunQueued + ":step2:settlement": 1,
				RunApproval + ":step3:settlement": 1, RunSignal + ":step3:settlement": 1,
				RunChildren + ":step2:settlement": 1, RunSleep + ":step3:settlement": 1, RunDead + ":step3:settlement": 1, RunRedriven + ":step3:settlement": 1,
			}
			if got := ledger.Keys(); !maps.Equal(got, paid) {
				t.Errorf("payments after the upgrade:\n  %v\nwant\n  %v", got, paid)
			}
			// No step that release committed runs again, and each after
			// them runs once (a parked step runs again to read its
			// decision or signal, and the dead one on its redrive).
			entered := map[string]int{
				RunQueued + ":charge": 1, RunQueued + ":settle": 1,
				RunApproval + ":review": 1, RunApproval + ":settle": 1,
				RunSignal + ":await": 1, RunSignal + ":settle": 1,
				RunKid + ":ask": 1, RunChildren + ":settle": 1,
				RunSleep + ":settle": 1, RunDead + ":fragile": 1, RunDead + ":settle": 1,
				RunRedriven + ":fragile": 1, RunRedriven + ":settle": 1,
			}
			if got := ledger.Entered(); !maps.Equal(got, entered) {
				t.Errorf("steps entered after the upgrade:\n  %v\nwant\n  %v", got, entered)
			}
			// What that release committed stays as it wrote it.
			for id, cps := range before {
				if cps == "" {
					continue
				}
				now := checkpoints(t, f, id)
				if !strings.HasPrefix(now, strings.TrimSuffix(cps, "]")) {
					t.Errorf("%s: the checkpoints that release committed changed:\n  before %s\n  after  %s", id, cps, now)
				}
			}
		})
	}
}

// checkpoints is run id's checkpoints as JSON, "" when it has none.
func checkpoints(t *testing.T, f *testfleet.Fleet, id string) string {
	t.Helper()
	cps, err := f.Store.Checkpoints(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) == 0 {
		return ""
	}
	b, err := json.Marshal(cps)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// untar unpacks the gzipped tar archive at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	gz, err := gzip.NewReader(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := extract(gz, dir); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// extract unpacks the tar archive r into dir: its directories and
// regular files (git archive's global header, the commit's id, is
// skipped).
func extract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = writeFile(target, tr)
		case tar.TypeXGlobalHeader:
		default:
			err = fmt.Errorf("%s: an entry of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
