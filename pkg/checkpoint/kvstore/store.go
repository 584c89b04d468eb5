package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// JetStream cluster. An existing bucket keeps its own setting. With
	// more than one replica the store reads from the stream leader
	// (STREAM.MSG.GET) instead of with direct gets, which followers answer
	// too; New reads the setting, so restart the processes after changing
	// the replicas of a bucket in use.
	Replicas int
	// Storage of the bucket when New creates it. Default file storage.
	Storage jetstream.StorageType
	// Timeout bounds each request of the store when ctx has no deadline.
	// Default 5s.
	Timeout time.Duration
}

// Store is a checkpoint.Store on a JetStream KV bucket.
//
// Keys, with R the run id and n the step:
//
//	run.<R>                  run JSON; its KV revision is Run.Rev; a purged run's tombstone
//	cp.<R>.<n>               checkpoint n JSON, created once, kept while its run exists
//	j.<R>.<n>                journal of step n: JSON object call name -> record
//	f.<R>.<n>                failures of step n: {"count": N, "recent": [last records]}
//	cp.<R>.<n>.<i>           checkpoint of branch i of the fan-out whose join is step n, created once
//	j.<R>.<n>.<i>, f.<R>.<n>.<i>  journal and failures of that branch
//	sp.<R>.<n>.branches      what the fan-out's branch results spent (spend.go)
//	wf.<name>.<version>      workflow JSON
//	run.<R>.a.<seq>          audit entry <seq> moved off the run record (Run.Spill)
//	run.<R>.p.<seq>          decision <seq> moved off the run record
//	run.<R>.b.<sha>          a payload or reason kept apart, by its hex SHA-256
//	due.<R>                  deadline index entry: {"at": unix ms, "lease_until": unix ms}
//	alive.<R>                the newest liveness mark of its step (alive.go)
//	run.=ix.…                the run indexes (index.go; "=" is in no run id)
//	run.=ix.t.<R>            counts the tombstone of purged run R, and expires with it
//
// Purge deletes every key of a run but run.<R>, which holds its tombstone
// (purge.go).
//
// A commit writes the checkpoint and the run in one atomic batch, or, on
// a one-replica file bucket, the checkpoint, then the run (see Commit).
// A write that changes a run's status writes its index entries with it
// (see the package doc, "Run indexes").
type Store struct {
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	stream  jetstream.Stream
	nc      *nats.Conn
	timeout time.Duration
	// msgGet is the JetStream API subject that reads one message of the
	// bucket's stream (STREAM.MSG.GET, through a domain or API prefix);
	// purgeAPI the one that purges its messages (STREAM.PURGE: Purge).
	msgGet, purgeAPI string
	// directGet + key is the direct get of a key's newest message; empty
	// when the stream does not allow direct gets or has more than one
	// replica: then reads go to the stream leader (see leaderGet).
	directGet string
	// putPrefix + key is where a write of key is published (through a
	// domain or API prefix when one is set, as the KV client does).
	putPrefix string
	// subjects is the prefix of the bucket's subjects: "$KV.<bucket>.".
	subjects string
	// directAPI is the stream's direct get API subject (batches and
	// multi_last reads of the index), empty when the stream does not
	// allow direct gets; leaderReads: the bucket is replicated, and a
	// direct get may come from a lagging follower.
	directAPI   string
	leaderReads bool
	// ttl: the stream allows message TTLs, which the markers that remove
	// index entries carry (markerMsg). Set by New, or by the first
	// commit (enableBatches).
	ttl atomic.Bool

	// runs caches the newest record this process read or wrote of each
	// run (what a write needs of the record it replaces); known the
	// index directories it stored.
	runs  runCache
	known keyCache

	workflows workflowCache

	// counts is this process's shard of the counts of ended runs.
	counts countShard

	// batches: commits go as one atomic batch. Set by New, or at the
	// first commit when mayEnable (see enableBatches); cleared for good
	// when the server shows it cannot take them.
	batches    atomic.Bool
	mayEnable  bool
	enableOnce sync.Once

	// afterCheckpoint, when set (by tests), runs between a commit's two
	// writes; afterIndex and afterRecord before and after the record
	// write of writeRun (after its index entries, before its markers).
	afterCheckpoint func(ctx context.Context)
	afterIndex      func(ctx context.Context)
	afterRecord     func(ctx context.Context)
	// swept is when this store last swept the listings (unix ns; see
	// sweep).
	swept atomic.Int64

	// afterTomb, when set (by tests), runs after a purge's tombstone,
	// before the rest of the purge; finishAfter replaces the constant
	// (tests).
	afterTomb   func(ctx context.Context)
	finishAfter time.Duration
	// refresh replaces refreshAge; onRead, when set, is given what each
	// direct get read (tests).
	refresh time.Duration
	onRead  func([]ixMsg)
	// loseCounts, when set (by tests), drops the writes of the counts'
	// shard, as a crash right after each record write would.
	loseCounts bool
}

var _ checkpoint.Store = (*Store)(nil)

// New binds the bucket, creating it when missing. It is safe to call from
// many processes at once. An existing bucket keeps its configuration but
// for allow_atomic, which the first commit turns on for a replicated or
// memory bucket (see enableBatches). New reads the bucket's replicas and
// storage once: restart the processes after changing them.
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
	kv, created, err := bindOrCreate(ctx, js, opts)
	if err != nil {
		return nil, fmt.Errorf("checkpoint bucket %s: %w", opts.Bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+opts.Bucket)
	if err != nil {
		return nil, fmt.Errorf("checkpoint bucket %s: %w", opts.Bucket, err)
	}
	api, subjects := apiPrefix(js), "$KV."+opts.Bucket+"."
	s := &Store{
		kv: kv, stream: st, js: js, nc: js.Conn(), timeout: opts.Timeout,
		msgGet:      api + "STREAM.MSG.GET.KV_" + opts.Bucket,
		purgeAPI:    api + "STREAM.PURGE.KV_" + opts.Bucket,
		finishAfter: finishAfter,
		refresh:     refreshAge,
		putPrefix:   subjects,
		subjects:    subjects,
	}
	if api != jetstream.DefaultAPIPrefix {
		s.putPrefix = api + subjects
	}
	// Followers answer direct gets too, and may lag: a replicated bucket
	// is read from its leader.
	cfg := st.CachedInfo().Config
	if cfg.AllowDirect && cfg.Mirror == nil {
		s.directAPI = api + "DIRECT.GET.KV_" + opts.Bucket
		if cfg.Replicas <= 1 {
			s.directGet = s.directAPI + "." + subjects
		}
	}
	s.leaderReads = cfg.Replicas > 1
	s.ttl.Store(cfg.AllowMsgTTL)
	if !stagesOnDisk(cfg) {
		s.batches.Store(cfg.AllowAtomicPublish)
		s.mayEnable = !cfg.AllowAtomicPublish
	}
	if created {
		if err := s.initCounts(ctx); err != nil {
			return nil, fmt.Errorf("checkpoint bucket %s: %w", opts.Bucket, err)
		}
	}
	return s, nil
}

// bindOrCreate binds the bucket, or creates it (created).
func bindOrCreate(ctx context.Context, js jetstream.JetStream, opts Options) (kv jetstream.KeyValue, created bool, err error) {
	kv, err = js.KeyValue(ctx, opts.Bucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, false, err
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      opts.Bucket,
		Description: "durable runs, checkpoints and call journals",
		Replicas:    opts.Replicas,
		Storage:     opts.Storage,
		// Message TTLs, for the markers that remove index entries: the
		// bucket's keys never expire (no MaxAge), so its markers are ours.
		LimitMarkerTTL: time.Second,
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) { // a server before 2.11
		cfg.LimitMarkerTTL = 0
		kv, err = js.CreateKeyValue(ctx, cfg)
	}
	if errors.Is(err, jetstream.ErrBucketExists) { // another process was first
		kv, err = js.KeyValue(ctx, opts.Bucket)
		return kv, false, err
	}
	return kv, err == nil, err
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

// branchKey is key (a checkpoint, journal or failures key of step n) for
// branch i of the fan-out whose join is step n: "<key>.<i>"; key itself
// for i = 0. Branch keys have four tokens, so the patterns over a run's
// step keys ("cp.<R>.*", "*.<R>.*") never match them.
func branchKey(key string, i int) string {
	if i == 0 {
		return key
	}
	return key + "." + strconv.Itoa(i)
}

func workflowKey(name string, version int) string {
	return "wf." + name + "." + strconv.Itoa(version)
}

// apiPrefix is the JetStream API prefix js sends requests with: the
// default, an imported account's prefix, or a domain's.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "" && o.APIPrefix != jetstream.DefaultAPIPrefix:
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
