package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durable-run/durable/internal/demo/devenv"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/service"
)

// The demo's crash plan: claim-0042 dies at the start of step 7 (after the
// payment of step 6 was checkpointed); claim-0043 dies inside step 6 after
// the payment went out and before it was recorded.
const demoCrash = "claim-0042:7,claim-0043:6:after-effect"

var demoRuns = []string{"claim-0042", "claim-0043"}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable demo", stderr)
	redisURL := fs.String("redis", "", "use the Redis store at this URL instead of JetStream KV")
	keep := fs.Bool("keep", false, "keep the data directory and worker logs")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("demo: unexpected argument %q", pos[0])
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "durable-demo-")
	if err != nil {
		return err
	}
	d := &demo{out: stdout, dir: dir, redisURL: *redisURL}
	err = d.run(ctx)
	if err != nil || *keep {
		fmt.Fprintf(stdout, "\ndata and worker logs kept in %s\n", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return err
}

type demo struct {
	out      io.Writer
	dir      string
	redisURL string
	env      *devenv.Env
	exe      string

	client *client.Client

	mu    sync.Mutex
	kills int
}

func (d *demo) say(format string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format+"\n", a...)
}

func (d *demo) run(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to start workers: %w", err)
	}
	d.exe = exe
	env, err := devenv.Start(devenv.Config{Dir: filepath.Join(d.dir, "data"), NATSPort: -1, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	d.env = env
	defer env.Close()
	store := "JetStream KV"
	if d.redisURL != "" {
		store = "Redis"
	}
	d.say("durable demo: two insurance claims, 9 steps each, real worker processes that get killed.")
	d.say("  embedded NATS at %s, checkpoint store %s, payments API at %s", env.NATSURL, store, env.PaymentsURL())
	d.say("  crash plan (DURABLE_CRASH): %s", demoCrash)

	c := service.Conn{NATSURL: env.NATSURL, RedisURL: d.redisURL, KVBucket: "durable"}
	cl, s, err := openClient(ctx, &c, io.Discard)
	if err != nil {
		return err
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 1; i <= 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); d.superviseWorker(wctx, i) }()
	}
	defer func() { stopWorkers(); wg.Wait() }()
	defer s.Close()
	d.client = cl
	if err := d.waitRegistered(ctx, s.Store); err != nil {
		return err
	}
	for _, id := range demoRuns {
		if _, _, err := cl.Start(ctx, client.StartRequest{Workflow: "claim", RunID: id, By: "demo"}); err != nil {
			return err
		}
		d.say("started %s: claim of 1840 EUR", id)
	}
	if err := d.follow(ctx, cl); err != nil {
		return err
	}
	stopWorkers()
	wg.Wait()
	return d.verify(ctx, cl)
}

// superviseWorker runs worker process n and restarts it whenever it dies,
// as a deployment would.
func (d *demo) superviseWorker(ctx context.Context, n int) {
	for ctx.Err() == nil {
		logPath := filepath.Join(d.dir, fmt.Sprintf("worker-%d.log", n))
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		if err != nil {
			d.say("worker %d: %v", n, err)
			return
		}
		// One step at a time per worker: a crash then takes exactly the
		// step it was planned for, never another run's step with it.
		args := []string{"worker", "--nats", d.env.NATSURL, "--ack-wait", "2s", "--concurrency", "1", "--drain-timeout", "2s"}
		if d.redisURL != "" {
			args = append(args, "--redis", d.redisURL)
		}
		cmd := exec.Command(d.exe, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "DURABLE_CRASH="+demoCrash, "DURABLE_PAYMENTS_URL="+d.env.PaymentsURL(), "DURABLE_CLAIMS_URL="+d.env.ClaimsURL(), "DURABLE_LOG_LEVEL=info")
		if err := cmd.Start(); err != nil {
			d.say("worker %d did not start: %v", n, err)
			_ = logf.Close()
			return
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			_ = logf.Close()
			return
		case err := <-done:
			_ = logf.Close()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
					d.mu.Lock()
					d.kills++
					d.mu.Unlock()
					d.say("  !! worker %d (pid %d) was killed with SIGKILL%s; restarting it. The step will be redelivered after the ack wait.", n, cmd.Process.Pid, crashedAt(logPath))
					continue
				}
			}
			d.say("  !! worker %d exited: %v; restarting it", n, err)
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// crashedAt reads the fault marker the killed worker printed last.
func crashedAt(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	i := strings.LastIndex(string(b), "durable-fault: crash ")
	if i < 0 {
		return ""
	}
	var run, point string
	var step, pid int
	if _, err := fmt.Sscanf(string(b[i:]), "durable-fault: crash run=%s step=%d point=%s pid=%d", &run, &step, &point, &pid); err != nil {
		return ""
	}
	what := map[string]string{
		"before":       "at the start of step %d",
		"after-effect": "inside step %d, after the payment went out and before it was recorded",
	}[point]
	if what == "" {
		what = "in step %d (" + point + ")"
	}
	return " while running " + run + " " + fmt.Sprintf(what, step)
}

func (d *demo) waitRegistered(ctx context.Context, store checkpoint.Registry) error {
	for {
		infos, err := store.Workflows(ctx)
		if err == nil {
			for _, in := range infos {
				if in.Name == "claim" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workers did not register the claim workflow (see %s/worker-*.log): %w", d.dir, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// follow narrates the runs from the store until both are terminal,
// approving each payout when it parks.
func (d *demo) follow(ctx context.Context, cl *client.Client) error {
	seen := map[string]int{}     // run -> checkpoints printed
	decided := map[string]bool{} // run -> approved by the demo
	for {
		allDone := true
		for _, id := range demoRuns {
			v, err := cl.Inspect(ctx, id)
			if err != nil {
				return err
			}
			for _, cp := range v.Checkpoints[min(seen[id], len(v.Checkpoints)):] {
				note := ""
				if cp.Attempt > 1 {
					note = fmt.Sprintf("  <- attempt %d: resumed here after the crash", cp.Attempt)
				}
				d.say("%s: step %d %-14s checkpointed%s", id, cp.Step, cp.Name, note)
				if cp.Name == "pay" {
					for _, e := range v.Effects {
						if e.Step == cp.Step {
							if e.Replayed {
								d.say("%s:        payment key %s answered Idempotent-Replayed: the first attempt had paid; nobody is paid twice", id, e.Key)
							} else {
								d.say("%s:        paid once with key %s", id, e.Key)
							}
						}
					}
				}
			}
			seen[id] = len(v.Checkpoints)
			if v.Status == checkpoint.StatusWaiting && !decided[id] && v.Wait != nil {
				d.say("%s: parked at step %d (%s) for group %s, payload %s", id, v.Wait.Step, v.Wait.StepName, v.Wait.Group, v.Wait.Payload)
				d.say("%s:        no worker holds it; approval resumes it on any worker", id)
				if _, err := cl.Decide(ctx, client.Decision{RunID: id, By: "adjuster-ana", Channel: client.ChannelCLI, Reason: "photos match the assessment", PayloadSHA256: v.Wait.PayloadSHA256}); err != nil {
					return err
				}
				decided[id] = true
				d.say("%s: adjuster-ana approved payload sha256 %s…", id, v.Wait.PayloadSHA256[:12])
			}
			if !v.Status.Terminal() {
				allDone = false
			}
		}
		if allDone {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runs did not finish in time (worker logs in %s): %w", d.dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// verify checks the outcome the demo promises and prints it.
func (d *demo) verify(ctx context.Context, cl *client.Client) error {
	pays, err := payments.Client{BaseURL: d.env.PaymentsURL()}.List(ctx)
	if err != nil {
		return err
	}
	var problems []string
	d.say("\nOutcome:")
	for _, id := range demoRuns {
		v, err := cl.Inspect(ctx, id)
		if err != nil {
			return err
		}
		var mine []payments.Payment
		for _, p := range pays {
			if p.RunID == id {
				mine = append(mine, p)
			}
		}
		var total int64
		requests := 0
		for _, p := range mine {
			total += p.Amount
			requests += p.Requests
		}
		d.say("  %s: %s after %d checkpoints; %d payment(s), total %d; step 6 presented its key %d time(s)", id, v.Status, len(v.Checkpoints), len(mine), total, requests)
		if v.Status != checkpoint.StatusCompleted {
			problems = append(problems, fmt.Sprintf("%s is %s (%s)", id, v.Status, v.Error))
		}
		for i, cp := range v.Checkpoints {
			if cp.Step != i+1 {
				problems = append(problems, fmt.Sprintf("%s: checkpoints not contiguous at %d", id, i+1))
				break
			}
		}
		if len(v.Checkpoints) != 9 {
			problems = append(problems, fmt.Sprintf("%s: %d checkpoints, want 9", id, len(v.Checkpoints)))
		}
		if len(mine) != 1 || total != 1840 || mine[0].Key != id+":step6" {
			problems = append(problems, fmt.Sprintf("%s: want one payment of 1840 with key %s:step6, got %d totalling %d", id, id, len(mine), total))
		}
		switch id {
		case "claim-0042":
			if requests != 1 {
				problems = append(problems, fmt.Sprintf("%s: step 6 ran %d times, want once", id, requests))
			}
			if len(v.Checkpoints) >= 7 && v.Checkpoints[6].Attempt < 2 {
				problems = append(problems, id+": step 7 did not resume after a crash")
			}
		case "claim-0043":
			replayed := false
			for _, e := range v.Effects {
				replayed = replayed || (e.Key == id+":step6" && e.Replayed)
			}
			if !replayed {
				problems = append(problems, id+": the payment of step 6 was not answered as replayed")
			}
		}
	}
	d.mu.Lock()
	kills := d.kills
	d.mu.Unlock()
	d.say("  worker processes killed with SIGKILL: %d", kills)
	if kills < 2 {
		problems = append(problems, fmt.Sprintf("%d worker kills, the crash plan has 2", kills))
	}
	if len(problems) > 0 {
		d.say("\nFAILED:\n  %s", strings.Join(problems, "\n  "))
		return errors.New("demo outcome does not hold")
	}
	d.say("\nOK: each claim paid exactly once (1840 EUR), every step checkpointed once, both crashes resumed where they stopped.")
	return nil
}
