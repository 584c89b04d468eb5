package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configures a Store.
type Options struct {
	// Bucket is the KV bucket name. Default "durable".
	Bucket string
	// Replicas of the bucket when New creates it. Default 1; use 3 on a
	// JetStream cluster. An existing bucket keeps its own setting.
	Replicas int
	// Storage of the bucket when New creates it. Default file storage.
	Storage jetstream.StorageType
	// Timeout bounds a commit when ctx has no deadline. Default 5s.
	Timeout time.Duration
}

// Store is a checkpoint.Store on a JetStream KV bucket.
//
// Keys, with R the run id and n the step:
//
//	run.<R>                  run JSON; its KV revision is Run.Rev
//	cp.<R>.<n>               checkpoint n JSON, created once, kept while its run exists
//	j.<R>.<n>                journal of step n: JSON object call name -> record
//	f.<R>.<n>                failures of step n: {"count": N, "recent": [last records]}
//	wf.<name>.<version>      workflow JSON
//	due.<R>                  deadline index entry: {"at": unix ms, "lease_until": unix ms}
//
// A commit writes the checkpoint, then the run (see Commit).
type Store struct {
	kv      jetstream.KeyValue
	timeout time.Duration

	// afterCheckpoint, when set (by tests), runs between a commit's two
	// writes.
	afterCheckpoint func(ctx context.Context)
}

var _ checkpoint.Store = (*Store)(nil)

// New binds the bucket, creating it when missing. It is safe to call from
// many processes at once. An existing bucket keeps its configuration.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if opts.Bucket == "" {
		opts.Bucket = "durable"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	kv, err := bindOrCreate(ctx, js, opts)
	if err != nil {
		return nil, fmt.Errorf("checkpoint bucket %s: %w", opts.Bucket, err)
	}
	return &Store{kv: kv, timeout: opts.Timeout}, nil
}

func bindOrCreate(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "durable runs, checkpoints and call journals",
		Replicas:    opts.Replicas,
		Storage:     opts.Storage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) { // another process was first
		return js.KeyValue(ctx, opts.Bucket)
	}
	return kv, err
}

func checkID(id string) error {
	if !checkpoint.ValidID(id) {
		return fmt.Errorf("invalid run id %q: use 1-128 letters, digits, '-' or '_'", id)
	}
	return nil
}

// readID rejects ids no run can have as not found, so `runs show bad.id`
// reports a missing run rather than a store failure.
func readID(id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("%w: %w", checkpoint.ErrNotFound, err)
	}
	return nil
}

func runKey(id string) string            { return "run." + id }
func cpKey(id string, n int) string      { return "cp." + id + "." + strconv.Itoa(n) }
func journalKey(id string, n int) string { return "j." + id + "." + strconv.Itoa(n) }
func failuresKey(id string, n int) string {
	return "f." + id + "." + strconv.Itoa(n)
}
func dueKey(id string) string { return "due." + id }
func workflowKey(name string, version int) string {
	return "wf." + name + "." + strconv.Itoa(version)
}
