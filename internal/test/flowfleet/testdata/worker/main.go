// Command worker is a worker process of package flowfleet's tests: it
// runs the workflow "agent" with the fleet's concurrency limits on
// (worker.Config.Flow), which `durable worker` does not set yet. It
// lives in testdata so that `go build ./...` leaves it alone; the tests
// build it with testenv.Binary.
//
// An agent run takes Turns turns (1 when unset); each turn is one step,
// "turn", that uses the resource "model" and calls the fake provider at
// -provider once: GET /?run=<id>&turn=<n>&tenant=<t> with the header
// X-Worker-Pid, so the provider can tell who called for what.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Agent is the agent workflow's input and state.
type Agent struct {
	Tenant string `json:"tenant"`
	Turns  int    `json:"turns,omitempty"`
	Done   int    `json:"done,omitempty"`
}

// agent is the workflow: turns that each call the model once.
func agent(provider string) *steps.Workflow[Agent] {
	hc := &http.Client{Timeout: time.Minute} // the fairness test holds calls while it queues runs
	pid := strconv.Itoa(os.Getpid())
	w := steps.New[Agent]("agent", 1).FairnessKey(func(in Agent) string { return in.Tenant })
	turn := w.Ref("turn")
	w.Step("turn", func(ctx context.Context, s *steps.Context, st Agent) (steps.Outcome[Agent], error) {
		q := url.Values{"run": {s.RunID()}, "turn": {strconv.Itoa(st.Done + 1)}, "tenant": {st.Tenant}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, provider+"/?"+q.Encode(), nil)
		if err != nil {
			return steps.Outcome[Agent]{}, err
		}
		req.Header.Set("X-Worker-Pid", pid)
		resp, err := hc.Do(req)
		if err != nil {
			return steps.Outcome[Agent]{}, fmt.Errorf("call the model: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return steps.Outcome[Agent]{}, fmt.Errorf("call the model: %s", resp.Status)
		}
		st.Done++
		if st.Done < max(st.Turns, 1) {
			return steps.Next(turn, st), nil
		}
		return steps.Complete(st), nil
	}, steps.Uses("model"))
	return w
}

func main() {
	natsURL := flag.String("nats", "", "NATS URL")
	redisURL := flag.String("redis", "", "Redis URL (empty: the JetStream KV store)")
	provider := flag.String("provider", "", "the fake provider's URL")
	concurrency := flag.Int("concurrency", 8, "steps at once")
	ackWait := flag.Duration("ack-wait", 5*time.Second, "the consumer's ack wait")
	flag.Parse()
	if *natsURL == "" || *provider == "" {
		fail(errors.New("want -nats and -provider"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *natsURL, *redisURL, *provider, *concurrency, *ackWait); err != nil {
		fail(err)
	}
}

func run(ctx context.Context, natsURL, redisURL, provider string, concurrency int, ackWait time.Duration) error {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(queue.PublishTimeout))
	if err != nil {
		return err
	}
	store, err := openStore(ctx, js, redisURL)
	if err != nil {
		return err
	}
	lim, err := flow.NewStore(ctx, js, flow.StoreOptions{})
	if err != nil {
		return err
	}
	reg := steps.NewRegistry()
	if err := reg.Register(agent(provider)); err != nil {
		return err
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Int("pid", os.Getpid()).Logger().Level(zerolog.InfoLevel)
	w, err := worker.New(worker.Config{JetStream: js, Store: store, Registry: reg, Concurrency: concurrency,
		AckWait: ackWait, DrainTimeout: 2 * time.Second, Logger: &log, Flow: lim})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

func openStore(ctx context.Context, js jetstream.JetStream, redisURL string) (checkpoint.Store, error) {
	if redisURL == "" {
		return kvstore.New(ctx, js, kvstore.Options{})
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, err
	}
	return redisstore.New(redis.NewClient(opt), redisstore.Options{}), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "flowfleet worker:", err)
	os.Exit(1)
}
