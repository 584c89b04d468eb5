package chaos

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// config is the size of one chaos run. The fault counts are minimums:
// worker kills go on every few hundred ms for the whole chaos window.
type config struct {
	name   string
	claims int
	agents int
	// fanouts of fanoutBranches branches, batches of batchChildren
	// claims, shipments waiting for a signal (issue 15).
	fanouts, batches, shipments int
	workers                     int
	schedulers                  int
	workerKills                 int // at least this many SIGKILLs of workers
	natsRestarts                int
	redisRestarts               int
	stops                       int // SIGSTOPs of a worker past its ack wait
	// redisPauses freeze redis-server with SIGSTOP for redisPauseFor, past
	// its clients' read timeout (3s), then SIGCONT it.
	redisPauses   int
	redisPauseFor time.Duration
	// window is how long faults are injected; runs are started over the
	// first startShare of it so that faults hit runs at every step.
	window     time.Duration
	startShare float64
	// killEvery is the mean time between worker kills (uniform in
	// [killEvery/2, 3*killEvery/2]).
	killEvery time.Duration
	ackWait   time.Duration
	// stopFor is how long a stopped worker stays frozen: past its ack wait,
	// so another worker takes over its steps.
	stopFor time.Duration
	// outages are how long NATS or Redis stays down before each restart,
	// in turn: short ones that clients ride out with their own retries,
	// long ones that make steps fail and go back for redelivery.
	outages     []time.Duration
	stuckAfter  time.Duration
	concurrency int
	// settle bounds the wait, after the faults stop, for every run to end.
	settle time.Duration
}

var (
	shortConfig = config{
		name: "short", claims: 40, agents: 15, fanouts: 6, batches: 3, shipments: 6, workers: 3, schedulers: 2,
		workerKills: 10, natsRestarts: 1, redisRestarts: 1, stops: 1, redisPauseFor: 5 * time.Second,
		window: 30 * time.Second, startShare: 0.9, killEvery: 700 * time.Millisecond,
		ackWait: 2 * time.Second, stopFor: 5 * time.Second, outages: []time.Duration{6 * time.Second},
		stuckAfter: 10 * time.Second, concurrency: 8, settle: 90 * time.Second,
	}
	fullConfig = config{
		name: "full", claims: 300, agents: 100, fanouts: 30, batches: 10, shipments: 30, workers: 3, schedulers: 2,
		workerKills: 60, natsRestarts: 2, redisRestarts: 2, stops: 2, redisPauses: 1, redisPauseFor: 5 * time.Second,
		window: 75 * time.Second, startShare: 0.9, killEvery: 500 * time.Millisecond,
		ackWait: 2 * time.Second, stopFor: 5 * time.Second, outages: []time.Duration{3 * time.Second, 8 * time.Second},
		stuckAfter: 10 * time.Second, concurrency: 8, settle: 4 * time.Minute,
	}
)

// configFromEnv picks the form from DURABLE_CHAOS ("" or "short", "full")
// and lets DURABLE_CHAOS_CLAIMS, _AGENTS, _FANOUTS, _BATCHES, _SHIPMENTS, _WINDOW, _OUTAGES (durations of
// the NATS and Redis outages in turn, e.g. "3s,8s") and _REDIS_PAUSES
// override it.
func configFromEnv() (config, error) {
	var c config
	switch v := os.Getenv("DURABLE_CHAOS"); v {
	case "", "short":
		c = shortConfig
	case "full":
		c = fullConfig
	default:
		return c, fmt.Errorf("DURABLE_CHAOS=%q: want short (default) or full", v)
	}
	for name, dst := range map[string]*int{"DURABLE_CHAOS_CLAIMS": &c.claims, "DURABLE_CHAOS_AGENTS": &c.agents, "DURABLE_CHAOS_REDIS_PAUSES": &c.redisPauses,
		"DURABLE_CHAOS_FANOUTS": &c.fanouts, "DURABLE_CHAOS_BATCHES": &c.batches, "DURABLE_CHAOS_SHIPMENTS": &c.shipments} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return c, fmt.Errorf("%s=%q: want a count", name, v)
			}
			*dst = n
		}
	}
	if v := os.Getenv("DURABLE_CHAOS_OUTAGES"); v != "" {
		c.outages = nil
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d < 0 {
				return c, fmt.Errorf("DURABLE_CHAOS_OUTAGES=%q: want Go durations separated by commas", v)
			}
			c.outages = append(c.outages, d)
		}
	}
	if v := os.Getenv("DURABLE_CHAOS_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("DURABLE_CHAOS_WINDOW=%q: want a Go duration", v)
		}
		c.window = d
	}
	return c, nil
}

func seedFromEnv() (int64, error) {
	if v := os.Getenv("DURABLE_CHAOS_SEED"); v != "" {
		return strconv.ParseInt(v, 10, 64)
	}
	return time.Now().UnixNano(), nil
}
