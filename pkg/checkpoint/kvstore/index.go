package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The run indexes (see the package doc, "Run indexes"). Every key lives
// under ixPrefix: inside run.> (the scheduler's and the approver's write
// permission, $KV.<bucket>.run.>), and "=" is in no run id, so no key of
// a run (run.<R>, run.<R>.<kind>.<seq>) and no pattern of the store
// ("run.*", "*.<R>.*", "run.<R>.<kind>.*") matches one. With L a listing
// (below), ms a time in unix milliseconds, R the run, N a nonce:
//
//	run.=ix.l.<status>.<wf>.<h>.<ms>.<R>.<N>  live entry: running or waiting since ms (h: liveShard)
//	<L>.e.<b0>.<ms>.<R>.<N>                   entry of a time listing
//	<L>.d0.<b1>.<b0> … <L>.d4.<b5>.<b4>       directories of a time listing: bucket b0
//	<L>.r.<b5>                                holds entries, …, b5 holds b4s
//	run.=ix.n.<wf>                            a workflow that has runs
//	run.=ix.b.progress                        how far BackfillIndex has come
//	run.=ix.t.<R>                             a purged run's tombstone (purge.go)
//
// A run without a workflow, or with a name that is no subject token,
// stands in keys as "=" (noWorkflow).
//
// The time listings L: run.=ix.w.<wf> (by creation) and
// run.=ix.sw.<status>.<wf> (ended statuses, by when the run took the
// status). A directory key says its last bucket holds entries; the root
// (r) lists the top buckets. A listing of every workflow reads them all
// at once, the workflow token a wildcard (run.=ix.w.*, run.=ix.sw.<status>.*):
// the tries have the same shape, so a directory of the union lists the
// children of every workflow's, and a leaf's filter matches the entries
// of all. A run has one entry in each listing kind it is in, written once.
const ixPrefix = "run.=ix."

// A time listing is a trie over its entries' milliseconds: b_k = ms >>
// trieShift[k]. A leaf (b0) spans 16 ms, and each directory up to 64
// children: a b1 spans 1 s, a b2 65 s, a b3 70 min, a b4 3.1 days, a b5
// 199 days, and the root lists the b5s. Reading the newest entries walks
// down the newest directories to the newest leaves: a page costs the
// directories on its path (at most 64 keys each, all read at once when
// the path is the one a page expects: see trieSource) and the leaves that
// hold it, whatever the listing holds besides. A burst puts at most 16 ms
// of itself in one leaf.
var trieShift = [6]uint{4, 10, 16, 22, 28, 34}

// trieTop is the level of the buckets the root lists.
const trieTop = len(trieShift) - 1

// maxResults is the most keys one multi_last read returns (the server's
// limit; more is errTooMany).
const maxResults = 1024

// markerTTL is how long the marker that removes an index entry stays (the
// server's minimum): after it, the entry's subject is gone from the
// stream, and from every read and count of its listing.
const markerTTL = "1s"

// ixState is what a run record says of its index entries (the "_ix"
// field of its value): a reader takes an entry for the run's only when
// its nonce is the record's, so an entry a refused or crashed write left
// is never listed twice or in the wrong status.
type ixState struct {
	// At is when the run took its status (unix ms): its status entries'
	// time. A run created in a status took it at its UpdatedAt (which
	// CreateRun defaults to its CreatedAt).
	At int64 `json:"at"`
	// N is the nonce of its status entries, C of its creation entries
	// (whose time is CreatedAt).
	N string `json:"n"`
	C string `json:"c"`
}

func liveStatus(st checkpoint.Status) bool {
	return st == checkpoint.StatusRunning || st == checkpoint.StatusWaiting
}

// ixList is one listing of the index: the key prefix of its entries and,
// for a time listing, of its directories. The prefix of a time listing
// of every workflow ends in "*", the workflow token: it is read, never
// written.
type ixList struct {
	prefix   string
	trie     bool
	status   checkpoint.Status // "" for the listings by creation
	workflow string            // "" for every workflow
}

func createdList() ixList { return workflowList("") }

// workflowList is the listing by creation of workflow wf, of every
// workflow when wf is "".
func workflowList(wf string) ixList {
	if wf == "" {
		return ixList{prefix: ixPrefix + "w.*", trie: true}
	}
	return ixList{prefix: ixPrefix + "w." + wf, trie: true, workflow: wf}
}

// statusList is the listing of status st (and workflow wf, when set).
// The live statuses have one flat listing each, whose entries name their
// workflow: it holds the live runs only, and is read whole (readLive).
func statusList(st checkpoint.Status, wf string) ixList {
	if liveStatus(st) {
		return ixList{prefix: ixPrefix + "l." + string(st), status: st, workflow: wf}
	}
	if wf == "" {
		return ixList{prefix: ixPrefix + "sw." + string(st) + ".*", trie: true, status: st}
	}
	return ixList{prefix: ixPrefix + "sw." + string(st) + "." + wf, trie: true, status: st, workflow: wf}
}

// cut returns what follows the prefix of l and a dot in key: the rest of
// an entry or directory key of l. For a listing of every workflow any
// workflow token matches.
func (l ixList) cut(key string) (string, bool) {
	base, wild := strings.CutSuffix(l.prefix, "*")
	rest, ok := strings.CutPrefix(key, base)
	if !ok || !wild {
		return strings.CutPrefix(rest, ".")
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	return rest[i+1:], true
}

// listOf is the listing a query reads.
func listOf(st checkpoint.Status, wf string) ixList {
	switch {
	case st != "":
		return statusList(st, wf)
	case wf != "":
		return workflowList(wf)
	}
	return createdList()
}

// entryFilter matches every entry of the time listing l (no directory).
func (l ixList) entryFilter() string { return l.prefix + ".e.>" }

func bucket(ms int64, level int) int64 { return ms >> trieShift[level] }
func itoa(n int64) string              { return strconv.FormatInt(n, 10) }

func (l ixList) leafFilter(b0 int64) string { return l.prefix + ".e." + itoa(b0) + ".>" }

// dirFilter matches the children of bucket b at level (1 to trieTop), or
// the root's (level trieTop+1).
func (l ixList) dirFilter(level int, b int64) string {
	if level > trieTop {
		return l.prefix + ".r.*"
	}
	return l.prefix + ".d" + strconv.Itoa(level-1) + "." + itoa(b) + ".*"
}

// dirKey is the directory key naming child in bucket b at level (1 to
// trieTop), or in the root (level trieTop+1).
func (l ixList) dirKey(level int, b, child int64) string {
	if level > trieTop {
		return l.prefix + ".r." + itoa(child)
	}
	return l.prefix + ".d" + strconv.Itoa(level-1) + "." + itoa(b) + "." + itoa(child)
}

// entry is the key of run id's entry at ms with nonce n in the time
// listing l, and the directory keys that lead to it, the root's first:
// one per level, from the root's entry for ms's top bucket down to the
// leaf's in its directory.
func (l ixList) entry(ms int64, id, n string) (key string, dirs []string) {
	for k := trieTop + 1; k > 0; k-- {
		var b int64
		if k <= trieTop {
			b = bucket(ms, k)
		}
		dirs = append(dirs, l.dirKey(k, b, bucket(ms, k-1)))
	}
	return l.prefix + ".e." + itoa(bucket(ms, 0)) + "." + itoa(ms) + "." + id + "." + n, dirs
}

func liveKey(st checkpoint.Status, wf string, ms int64, id, n string) string {
	return ixPrefix + "l." + string(st) + "." + wf + "." + liveShard(id) + "." + itoa(ms) + "." + id + "." + n
}

// liveShards splits the live listings: a read of the newest message of
// each subject (multi_last, which finds each subject's block through the
// stream's subject index instead of walking the stream) returns at most
// 1024, so a listing is read shard by shard, as many at once as fit.
const liveShards = 64

// liveShard is run id's shard of the live listings (FNV-1a).
func liveShard(id string) string {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return strconv.Itoa(int(h % liveShards))
}

// liveFilters match the live entries of status st (any, "*") of workflow
// wf (any: ""), shard by shard.
func liveFilters(st, wf string) []string {
	if wf == "" {
		wf = "*"
	}
	filters := make([]string, liveShards)
	for i := range filters {
		filters[i] = ixPrefix + "l." + st + "." + wf + "." + strconv.Itoa(i) + ".>"
	}
	return filters
}

func nameKey(wf string) string { return ixPrefix + "n." + wf }

// noWorkflow stands for the workflow of a run without one, or with a name
// that is not a subject token (no query can name either), in keys.
const noWorkflow = "="

// wfToken is workflow wf as a token of a key.
func wfToken(wf string) string {
	if !checkpoint.ValidID(wf) {
		return noWorkflow
	}
	return wf
}

const progressKey = ixPrefix + "b.progress"

// ixWrite is what one write of a run record does to the index.
type ixWrite struct {
	// ix is the record's _ix after the write.
	ix *ixState
	// puts are the entries, directories and workflow names to store
	// before the record (or in its batch); own are the entries among
	// them, which only this write names: removed again when the record
	// write is refused; dirs the others. late are the directories that
	// name a node whose time ended rewriteAge ago or more, stored after
	// puts whatever the process remembers, so that a walk that removes
	// them meanwhile as empty does not hide the entry (see trieSource).
	puts, own, dirs, late []string
	// drops are the entries of the record before the write that the
	// record no longer names: removed after it (or in its batch).
	drops []string
	// counts are the changes to the counts of ended runs, made once the
	// record is written (counts.go).
	counts []countDelta
}

func (w ixWrite) touches() bool { return len(w.puts) > 0 || len(w.late) > 0 || len(w.drops) > 0 }

// statusEntries are the key (and directories) of run's entry for status
// st since ms with nonce n: a live entry, or one in the time listing of
// the status and workflow wf (a token: see wfToken).
func statusEntries(st checkpoint.Status, wf string, ms int64, id, n string) (entries, dirs []string) {
	if liveStatus(st) {
		return []string{liveKey(st, wf, ms, id, n)}, nil
	}
	key, dirs := statusList(st, wf).entry(ms, id, n)
	return []string{key}, dirs
}

func creationEntries(wf string, ms int64, id, n string) (entries, dirs []string) {
	key, dirs := workflowList(wf).entry(ms, id, n)
	return []string{key}, dirs
}

// plan says what writing next over the record b (nil: a new run) does to
// the index. A write that keeps the status keeps the entries; one that
// changes it adds the entries of the new status, taken at the write's
// UpdatedAt (now when it has none: when the run took the status, as the
// Redis store has it, so that retention's cutoff is the one the run
// shows), and drops those of the old. A record from before the index
// (b.ix nil) gets every entry, the status taken at its UpdatedAt when it
// keeps it.
func (s *Store) plan(b *base, next checkpoint.Run) ixWrite {
	var w ixWrite
	var ix ixState
	switch {
	case b != nil && b.ix != nil && b.status == next.Status:
		ix := *b.ix
		return ixWrite{ix: &ix}
	case b != nil && b.ix != nil:
		ix = ixState{At: entered(next), N: nonce(), C: b.ix.C}
		w.drops, _ = statusEntries(b.status, wfToken(b.workflow), b.ix.At, next.ID, b.ix.N)
		w.counts = endedDeltas(b.status, true, next.Status, wfToken(next.Workflow), wfToken(b.workflow))
	case b != nil: // written before the index
		n := nonce()
		ix = ixState{At: entered(next), N: n, C: n}
		if b.status == next.Status {
			ix.At = b.updated.UnixMilli()
		}
		w.counts = endedDeltas("", false, next.Status, wfToken(next.Workflow), "")
	default:
		n := nonce()
		ix = ixState{At: entered(next), N: n, C: n}
		w.counts = endedDeltas("", false, next.Status, wfToken(next.Workflow), "")
	}
	now := time.Now()
	ended := now.Add(-rewriteAge).UnixMilli()
	stale := now.Add(-s.refresh).UnixMilli()
	add := func(entries, dirs []string, ms int64) {
		w.own = append(w.own, entries...)
		for i, d := range dirs {
			// dirs holds each listing's path, root first (l.entry): d
			// names a node of level k, which a walk may remove as empty
			// once its time ended (trieSource).
			k := trieTop - i%(trieTop+1)
			since := int64(math.MinInt64)
			if k >= wholeBelow {
				since = stale
			}
			switch {
			case (bucket(ms, k)+1)<<trieShift[k] <= ended:
				w.late = append(w.late, d)
			case !s.known.has(d, since):
				w.dirs = append(w.dirs, d)
			}
		}
	}
	wf := wfToken(next.Workflow)
	entries, dirs := statusEntries(next.Status, wf, ix.At, next.ID, ix.N)
	add(entries, dirs, ix.At)
	if b == nil || b.ix == nil {
		ms := next.CreatedAt.UnixMilli()
		entries, dirs := creationEntries(wf, ms, next.ID, ix.C)
		add(entries, dirs, ms)
		if wf != noWorkflow && !s.known.has(nameKey(wf), math.MinInt64) {
			w.dirs = append(w.dirs, nameKey(wf))
		}
	}
	w.ix = &ix
	w.puts = append(append(w.puts, w.own...), w.dirs...)
	return w
}

// refreshAge is how often a process writes again a directory key it
// wrote that names a node of level wholeBelow or above (70 minutes and
// more) whose time has not ended: the first read of a newest-first walk
// reads such a key on the path to now (trieSource.readAhead), and a
// key written again lies in the stream's newest block, which the server
// holds in memory, instead of one written up to 199 days ago.
const refreshAge = time.Minute

// entered is when run took its status, in unix ms: the write's
// UpdatedAt, now when it has none.
func entered(run checkpoint.Run) int64 {
	if run.UpdatedAt.IsZero() {
		return time.Now().UnixMilli()
	}
	return run.UpdatedAt.UnixMilli()
}

// wrote records that w's keys are stored: its directories and names are
// not written again by this process (no write removes them; a walk
// removes a directory only once its time ended, and plan writes those
// again whatever it remembers).
func (s *Store) wrote(w ixWrite) {
	now := time.Now().UnixMilli()
	for _, k := range w.dirs {
		s.known.add(k, now)
	}
}

const nonceChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// nonce names the entries of one write: 8 characters, 47 bits.
func nonce() string {
	var b [8]byte
	for i := range b {
		b[i] = nonceChars[rand.IntN(len(nonceChars))]
	}
	return string(b[:])
}

// putIndex stores keys (entries, directories, names; the value is not
// read) at once and waits for every answer.
func (s *Store) putIndex(ctx context.Context, keys []string) error {
	msgs := make([]*nats.Msg, len(keys))
	for i, key := range keys {
		msgs[i] = s.putMsg(key, []byte("1"), anyRevision)
	}
	return s.publishAll(ctx, msgs)
}

// dropIndex removes entries at once, with a marker that expires (see
// markerMsg), and waits for every answer.
func (s *Store) dropIndex(ctx context.Context, keys []string) error {
	msgs := make([]*nats.Msg, len(keys))
	for i, key := range keys {
		msgs[i] = s.markerMsg(key, 0)
	}
	return s.publishAll(ctx, msgs)
}

// publishAll sends msgs, writes to the bucket's stream, all at once
// (JetStream's asynchronous publish, one connection: the stream stores
// them in the order sent) and waits for every PubAck: one round trip,
// and no goroutine, however many they are.
func (s *Store) publishAll(ctx context.Context, msgs []*nats.Msg) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var errs []error
	for _, m := range msgs {
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", strings.TrimPrefix(m.Subject, s.putPrefix), err))
			continue
		}
		futures = append(futures, f)
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("write %s: %w", strings.TrimPrefix(f.Msg().Subject, s.putPrefix), err))
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		}
	}
	return errors.Join(errs...)
}

// markerMsg removes an index entry: a purge marker that rolls up the
// subject and expires after markerTTL, so that nothing of the entry stays
// in the stream (a KV delete leaves its marker for good, and a listing
// that reads every marker of every run that ever was live costs the
// history). Where the stream does not allow message TTLs (a bucket made
// by an older version, until a worker's first commit turns them on in
// enableBatches; a server before 2.11) the marker stays, until a read of
// a live listing gives it a TTL (readLive). With seq set, only the
// message at seq is removed: a later write of the key stays.
func (s *Store) markerMsg(key string, seq uint64) *nats.Msg {
	h := nats.Header{hdrOperation: []string{"PURGE"}, hdrRollup: []string{"sub"}}
	if s.ttl.Load() {
		h.Set(hdrTTL, markerTTL)
	}
	if seq > 0 {
		h.Set(hdrExpectedSeq, strconv.FormatUint(seq, 10))
	}
	return &nats.Msg{Subject: s.putPrefix + key, Header: h}
}

// indexWriters bounds the concurrent requests of one index operation.
const indexWriters = 16

// each runs fn on every key, at most indexWriters at once, and joins the
// errors.
func each(keys []string, fn func(string) error) error {
	return parallel(len(keys), func(i int) error { return fn(keys[i]) })
}

// parallel runs fn(0..n-1), at most indexWriters at once, and joins the
// errors.
func parallel(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	slots := make(chan struct{}, indexWriters)
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = fn(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// keyCache remembers keys this process stored that no write removes
// (directories, workflow names), and when (unix ms), so that it writes
// them once, or once in a while. It forgets everything when full:
// writing a key again is harmless.
type keyCache struct {
	mu   sync.Mutex
	keys map[string]int64
}

const keyCacheSize = 1 << 14

// has says whether this process stored k at since (unix ms) or after.
func (c *keyCache) has(k string, since int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.keys[k]
	return ok && at >= since
}

func (c *keyCache) add(k string, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil || len(c.keys) >= keyCacheSize {
		c.keys = map[string]int64{}
	}
	c.keys[k] = at
}
