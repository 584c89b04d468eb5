package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go"
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
//	cp.<R>.<n>               checkpoint n JSON, created once, never deleted
//	j.<R>.<n>                journal of step n: JSON object call name -> record
//	f.<R>.<n>                failures of step n: {"count": N, "recent": [last records]}
//	wf.<name>.<version>      workflow JSON
//	due.<R>                  deadline index entry: {"at": unix ms, "lease_until": unix ms}
//
// A commit is one JetStream atomic batch: checkpoint create and run
// compare-and-set land together or not at all.
type Store struct {
	js        jetstream.JetStream
	kv        jetstream.KeyValue
	putPrefix string
	timeout   time.Duration
}

var _ checkpoint.Store = (*Store)(nil)

// New binds the bucket, creating it when missing, and enables atomic batch
// publish on its stream. It is safe to call from many processes at once.
//
// It does not use CreateOrUpdateKeyValue: that rewrites the whole stream
// config and would switch atomic publish off under running workers.
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
	if err := enableAtomicPublish(ctx, js, "KV_"+opts.Bucket); err != nil {
		return nil, fmt.Errorf("checkpoint bucket %s: %w", opts.Bucket, err)
	}
	return &Store{js: js, kv: kv, putPrefix: putPrefix(js, opts.Bucket), timeout: opts.Timeout}, nil
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

func enableAtomicPublish(ctx context.Context, js jetstream.JetStream, stream string) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return nil
	}
	cfg.AllowAtomicPublish = true
	updated, err := js.UpdateStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("enable atomic publish: %w", err)
	}
	// A server before 2.12 ignores the unknown field instead of refusing it.
	if !updated.CachedInfo().Config.AllowAtomicPublish {
		return errors.New("enable atomic publish: the server does not support atomic batch publish (needs nats-server 2.12 or later)")
	}
	return nil
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

// subject is where a KV put of key is published. Like the KV client, it
// goes through the JetStream API prefix when one is set (a domain or an
// imported account's prefix).
func (s *Store) subject(key string) string { return s.putPrefix + key }

func putPrefix(js jetstream.JetStream, bucket string) string {
	o := js.Options()
	var api string
	switch {
	case o.APIPrefix != "" && o.APIPrefix != jetstream.DefaultAPIPrefix:
		api = strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		api = "$JS." + o.Domain + ".API."
	}
	return api + "$KV." + bucket + "."
}

// conn is the core NATS connection, for the atomic batch publish the KV
// API does not expose.
func (s *Store) conn() *nats.Conn { return s.js.Conn() }
