package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/redis/go-redis/v9"
)

// Options configures a Store.
type Options struct {
	// Prefix starts every key. Default "durable". It must not contain '{' or
	// '}', which would change the Redis Cluster hash tag of run keys.
	Prefix string
}

// Store is a checkpoint.Store on Redis (standalone, Sentinel or Cluster).
//
// Keys, with R the run id:
//
//	<prefix>:{R}:run      hash: doc (run JSON), rev (revision), last_cp (highest committed step),
//	                      fo (the fan-outs committed, "<step>:<branches>," each, so that a
//	                      purge names their keys without reading checkpoints; missing in a
//	                      run created before it existed)
//	<prefix>:{R}:cp:<n>   string: checkpoint n JSON, written once, never expired
//	<prefix>:{R}:j:<n>    hash: call name -> call record JSON, journal of step n
//	<prefix>:{R}:f:<n>    list: the last failure records of step n (JSON), oldest first
//	<prefix>:{R}:fc:<n>   string: how many failures step n has recorded
//	<prefix>:{R}:cp:<n>.<i>, j:<n>.<i>, f:<n>.<i>, fc:<n>.<i>
//	                      the same for branch i of the fan-out whose join is step n
//	<prefix>:{R}:audit    hash: sequence -> audit entry JSON moved off the run record
//	<prefix>:{R}:approvals hash: sequence -> decision JSON moved off the run record
//	<prefix>:{R}:blobs    hash: hex SHA-256 -> a payload or reason kept apart
//	<prefix>:{R}:cp:<n>:bits  string: bitmap of the fan-out's committed branches
//	<prefix>:{R}:cp:<n>:spend string: what those branches spent (INCRBYFLOAT)
//	<prefix>:ix{k}:…      the run index, shard k = crc32(R) mod 16 (index.go);
//	                      the run hash's field st is its status there, its
//	                      field tomb the tombstone of a purged run (purge.go)
//	<prefix>:runs         zset of every run id, by creation: written by the
//	                      release before the index, drained by BackfillIndex
//	<prefix>:workflows    hash: "name@version" -> workflow JSON
//	<prefix>:due          zset: deadline index, run id scored by due time or,
//	                      while claimed, by the end of the lease (unix ms)
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	batch  *batcher            // the scripts and transactions of the step path
	shards [indexShards]string // each index shard's key prefix (index.go)
	// single: one Redis node (not a Cluster client), where Load reads in a
	// MULTI/EXEC transaction instead of a script.
	single bool
}

var _ checkpoint.Store = (*Store)(nil)

// New returns a Store using client. It panics on an invalid Prefix, which
// is a programming error.
func New(client redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "durable"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		panic(fmt.Sprintf("redisstore: prefix %q must not contain '{' or '}'", opts.Prefix))
	}
	_, single := client.(*redis.Client)
	return &Store{rdb: client, prefix: opts.Prefix, batch: &batcher{rdb: client}, single: single, shards: shardPrefixes(opts.Prefix)}
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

func (s *Store) tag(id string) string          { return s.prefix + ":{" + id + "}:" }
func (s *Store) runKey(id string) string       { return s.tag(id) + "run" }
func (s *Store) cpKey(id string, n int) string { return s.tag(id) + "cp:" + strconv.Itoa(n) }
func (s *Store) journalKey(id string, n int) string {
	return s.tag(id) + "j:" + strconv.Itoa(n)
}
func (s *Store) failuresKey(id string, n int) string {
	return s.tag(id) + "f:" + strconv.Itoa(n)
}
func (s *Store) failureCountKey(id string, n int) string {
	return s.tag(id) + "fc:" + strconv.Itoa(n)
}
func (s *Store) auditKey(id string) string     { return s.tag(id) + "audit" }
func (s *Store) approvalsKey(id string) string { return s.tag(id) + "approvals" }
func (s *Store) blobsKey(id string) string     { return s.tag(id) + "blobs" }
func (s *Store) workflowsKey() string          { return s.prefix + ":workflows" }
func (s *Store) dueKey() string                { return s.prefix + ":due" }

// commitKeys is runKey, cpKey(n) and spillKeys for run id, as a commit
// passes them to its script, spelled from one tag: every step's path.
func (s *Store) commitKeys(id string, n int) []string {
	tag := s.tag(id)
	return []string{tag + "run", tag + "cp:" + strconv.Itoa(n), tag + "audit", tag + "approvals", tag + "blobs"}
}

// scriptCode maps a write script's negative reply to a sentinel.
func scriptCode(code int64) error {
	switch code {
	case codeNotFound:
		return checkpoint.ErrNotFound
	case codeCheckpointExists:
		return checkpoint.ErrCheckpointExists
	case codeConflict:
		return checkpoint.ErrConflict
	case codeLive:
		return errors.New("the stored run is not ended")
	}
	return fmt.Errorf("unexpected script reply %d", code)
}

// str reads a bulk string out of a script or HMGET reply; ok is false for nil.
func str(v any) (string, bool, error) {
	switch v := v.(type) {
	case nil:
		return "", false, nil
	case string:
		return v, true, nil
	}
	return "", false, fmt.Errorf("unexpected reply type %T", v)
}

// decodeRun builds a run from its hash fields doc and rev.
func decodeRun(doc, rev any) (checkpoint.Run, error) {
	d, ok, err := str(doc)
	if err != nil {
		return checkpoint.Run{}, err
	}
	if !ok {
		return checkpoint.Run{}, checkpoint.ErrNotFound
	}
	r, ok, err := str(rev)
	if err != nil || !ok {
		return checkpoint.Run{}, errors.Join(errors.New("run hash has no rev"), err)
	}
	var run checkpoint.Run
	if err := unmarshal(d, &run); err != nil {
		return checkpoint.Run{}, err
	}
	if run.Rev, err = strconv.ParseUint(r, 10, 64); err != nil {
		return checkpoint.Run{}, fmt.Errorf("run rev %q: %w", r, err)
	}
	return run, nil
}
