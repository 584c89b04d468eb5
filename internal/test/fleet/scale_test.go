package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// scaleRow is one measurement: n worker processes draining a backlog.
type scaleRow struct {
	topology    string
	workers     int
	concurrency int
	claims      int
	steps       int
	span        time.Duration // first to last checkpoint commit
	wall        time.Duration // workers launched to last run completed
	resumed     int
	cpu         float64 // share of the machine's CPU time busy during the span
}

func (r scaleRow) rate() float64 { return float64(r.steps) / r.span.Seconds() }

// TestFleetScale measures how throughput grows with worker processes: a
// backlog of claims (amount 500: nine steps, one payment, no approval) is
// started while no worker runs, then 1, 2 or 4 workers drain it, and the
// rate is the checkpoints committed over the span from the first commit
// to the last. Both topologies are measured: the cluster of TestFleet
// (three NATS nodes, R3; Redis Cluster 3+3) and one nats-server with one
// redis-server.
//
// It runs with DURABLE_FLEET_SCALE=1 (or =cluster, =single for one
// topology); DURABLE_FLEET_SCALE_CLAIMS sets the backlog (default 1000);
// DURABLE_FLEET_SCALE_SLOW=1 makes the payments API answer 50-250ms after
// paying, as in TestFleet (a step that waits on the network).
func TestFleetScale(t *testing.T) {
	mode := os.Getenv("DURABLE_FLEET_SCALE")
	if mode == "" {
		t.Skip("the scale-out measurement runs with DURABLE_FLEET_SCALE=1 (both topologies), =cluster or =single")
	}
	claims := envInt(t, "DURABLE_FLEET_SCALE_CLAIMS", 1000)
	slow := os.Getenv("DURABLE_FLEET_SCALE_SLOW") != ""
	var topologies []bool // Single?
	switch mode {
	case "cluster":
		topologies = []bool{false}
	case "single":
		topologies = []bool{true}
	default:
		topologies = []bool{false, true}
	}
	var rows []scaleRow
	for _, single := range topologies {
		name := "cluster"
		if single {
			name = "single"
		}
		t.Run(name, func(t *testing.T) {
			rows = append(rows, measureScale(t, single, slow, claims)...)
		})
	}
	var b strings.Builder
	pay := "the payments API answers at once"
	if slow {
		pay = "the payments API answers 50-250ms after paying"
	}
	fmt.Fprintf(&b, "\ndurable scale-out (%d claims of 9 steps per measurement; %s; %d CPUs for every process)\n", claims, pay, runtime.NumCPU())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "topology\tworkers\t--concurrency\tsteps\tspan\tsteps/s\tvs 1 worker\tCPU busy\tredeliveries\t")
	base := map[string]float64{}
	for _, r := range rows {
		if r.workers == 1 && r.concurrency == 16 {
			base[r.topology] = r.rate()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%.0f\t%.2f×\t%.0f%%\t%d\t\n", r.topology, r.workers, r.concurrency, r.steps,
			r.span.Round(10*time.Millisecond), r.rate(), r.rate()/base[r.topology], 100*r.cpu, r.resumed)
	}
	tw.Flush()
	fmt.Print(b.String())
}

func measureScale(t *testing.T, single, slow bool, claims int) []scaleRow {
	dir := fleetDir(t)
	f := Start(t, dir, Options{Single: single, SlowPayments: slow})
	topology := fmt.Sprintf("%d NATS R%d + Redis Cluster %d+%d", len(f.NATS.Nodes), f.Opts.Replicas, f.Opts.RedisPrimaries, f.Opts.RedisPrimaries*f.Opts.RedisReplicas)
	if single {
		topology = "1 NATS + 1 Redis"
	}
	// A worker registers the workflows and creates the consumers, then
	// leaves: the backlogs are started with no worker running.
	w := f.AddWorker()
	if err := w.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	f.WaitWorkflows(60*time.Second, "claim")
	_ = w.Stop(10 * time.Second)

	completed := make(chan string, claims*4)
	sub, err := f.NC.Subscribe(queue.EventSubject("claim", string(checkpoint.StatusCompleted)), func(m *nats.Msg) {
		var ev queue.StatusEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			completed <- ev.RunID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	var rows []scaleRow
	// 1, 2 and 4 processes of 16 slots each, and one process of 64 slots:
	// whether a gain comes from the processes or from the steps in flight.
	for _, m := range []struct{ n, conc int }{{1, 16}, {2, 16}, {4, 16}, {1, 64}} {
		n := m.n
		prefix := fmt.Sprintf("scale-%s-w%d-c%d", map[bool]string{true: "single", false: "cluster"}[single], n, m.conc)
		ids := startBacklog(t, f, prefix, claims)
		cpu0 := readCPU()
		launched := time.Now()
		f.Opts.Concurrency = m.conc
		var workers []*Service
		for range n {
			workers = append(workers, f.AddWorker())
		}
		done := map[string]bool{}
		mine := map[string]bool{}
		for _, id := range ids {
			mine[id] = true
		}
		timeout := time.After(5 * time.Minute)
		for len(done) < len(ids) {
			select {
			case id := <-completed:
				if mine[id] {
					done[id] = true
				}
			case <-timeout:
				t.Fatalf("%d workers: %d of %d claims completed after 5 minutes", n, len(done), len(ids))
			}
		}
		wall := time.Since(launched)
		cpu := readCPU().busySince(cpu0)
		for _, w := range workers {
			_ = w.Stop(10 * time.Second)
		}
		row := scaleRow{topology: topology, workers: n, concurrency: m.conc, claims: claims, wall: wall, cpu: cpu}
		first, last := time.Time{}, time.Time{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for _, id := range ids {
			cps, err := f.Store.Checkpoints(ctx, id)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			if len(cps) != 9 {
				t.Errorf("%s: %d checkpoints", id, len(cps))
			}
			for _, cp := range cps {
				if first.IsZero() || cp.At.Before(first) {
					first = cp.At
				}
				if cp.At.After(last) {
					last = cp.At
				}
				if cp.Attempt > 1 {
					row.resumed++
				}
			}
			row.steps += len(cps)
		}
		cancel()
		row.span = last.Sub(first)
		t.Logf("%s, %d workers of %d slots: %d steps in %s (%.0f steps/s); launch to done %s, CPU %.0f%% busy", topology, n, m.conc, row.steps,
			row.span.Round(10*time.Millisecond), row.rate(), wall.Round(10*time.Millisecond), 100*cpu)
		rows = append(rows, row)
	}
	return rows
}

// startBacklog starts n claims of amount 500 with no worker running.
func startBacklog(t *testing.T, f *Fleet, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i+1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan string)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _, err := f.Client.Start(ctx, client.StartRequest{Workflow: "claim", RunID: id, Input: json.RawMessage(`{"amount": 500}`)})
				cancel()
				if err != nil {
					errs <- fmt.Errorf("start %s: %w", id, err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// cpuTimes are the machine's CPU jiffies from /proc/stat (Linux).
type cpuTimes struct{ busy, total uint64 }

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var t cpuTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t
}

// busySince is the share of CPU time busy since then (0 when unknown).
func (c cpuTimes) busySince(then cpuTimes) float64 {
	if c.total <= then.total {
		return 0
	}
	return float64(c.busy-then.busy) / float64(c.total-then.total)
}
