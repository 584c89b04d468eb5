package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// ixEntry is an index entry as read.
type ixEntry struct {
	key   string
	seq   uint64
	at    time.Time // when the server stored it
	ms    int64     // its time in the listing
	id    string
	nonce string
	// workflow is named by live entries only.
	workflow string
}

func (e ixEntry) runKey() checkpoint.Cursor {
	return checkpoint.Cursor{At: time.UnixMilli(e.ms).UTC(), ID: e.id}
}

// before orders entries newest first: by time, then by id.
func (e ixEntry) before(o ixEntry) bool {
	if e.ms != o.ms {
		return e.ms > o.ms
	}
	return e.id > o.id
}

// after reports whether e comes after the cursor k in a listing, newest
// first (the zero key comes before everything).
func (e ixEntry) after(k checkpoint.Cursor) bool {
	if k.IsZero() {
		return true
	}
	if ms := k.At.UnixMilli(); e.ms != ms {
		return e.ms < ms
	}
	return e.id < k.ID
}

// parse reads the entry m of l from its key: "<b0>.<ms>.<R>.<N>" after
// "<L>.e." in a time listing, "<wf>.<h>.<ms>.<R>.<N>" after
// "run.=ix.l.<status>." in a live one.
func (l ixList) parse(m ixMsg) (ixEntry, bool) {
	prefix, n := l.prefix+".e.", 4
	if !l.trie {
		prefix, n = ixPrefix+"l."+string(l.status)+".", 5
	}
	rest, ok := strings.CutPrefix(m.key, prefix)
	t := strings.Split(rest, ".")
	if m.marker || !ok || len(t) != n {
		return ixEntry{}, false
	}
	t = t[n-3:] // <ms>.<R>.<N>
	ms, err := strconv.ParseInt(t[0], 10, 64)
	if err != nil {
		return ixEntry{}, false
	}
	e := ixEntry{key: m.key, seq: m.seq, at: m.at, ms: ms, id: t[1], nonce: t[2]}
	if !l.trie {
		e.workflow = rest[:strings.IndexByte(rest, '.')]
	}
	return e, true
}

// names reports whether rec's record names entry e of l: the run is in
// the listing, and e is the entry its last write made for it (a record
// from before the index names any entry that fits it).
func (l ixList) names(e ixEntry, rec record) bool {
	run := rec.run
	if wf := wfToken(run.Workflow); (l.workflow != "" && wf != l.workflow) || (e.workflow != "" && wf != e.workflow) {
		return false
	}
	if l.status == "" {
		return rec.ix == nil || rec.ix.C == e.nonce
	}
	return run.Status == l.status && (rec.ix == nil || rec.ix.N == e.nonce)
}

// staleAfter is the age after which an entry no record names is removed
// by a reader even when the record has not been written since: the
// writer that stored it has given up on its record write long before.
const staleAfter = 2 * time.Minute

// listed is a run found through an index entry.
type listed struct {
	key checkpoint.Cursor
	run checkpoint.Run
}

// resolve reads the records of entries (in order) and keeps the entries
// their records name, each run once (seen spans the calls of a listing).
// An entry no record will name again (a write that was refused or
// crashed between its index writes and its record, a run that left the
// status and crashed before dropping the entry) is removed on the way,
// without waiting for the answer: by a marker conditional on its
// sequence, so that a later write of the key stays. That is when the
// record was written after the entry (a writer whose entry precedes its
// record write cannot win over a newer record), or the entry is older
// than staleAfter.
func (s *Store) resolve(ctx context.Context, l ixList, entries []ixEntry, seen map[string]bool) ([]listed, error) {
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.id)
	}
	recs, err := s.readRecords(ctx, ids)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []listed
	for _, e := range entries {
		rec, ok := recs[e.id]
		if ok && l.names(e, rec) {
			if !seen[e.id] {
				seen[e.id] = true
				out = append(out, listed{key: e.runKey(), run: rec.run})
			}
			continue
		}
		if (ok && rec.run.Rev > e.seq) || now.Sub(e.at) > staleAfter {
			_ = s.nc.PublishMsg(s.markerMsg(e.key, e.seq))
			if ok {
				// The write that stored e stored its twin in the other
				// listing of the pair (by workflow or not), under the
				// same nonce, which no other write uses.
				for _, k := range l.twins(e, rec.run.Workflow) {
					_ = s.nc.PublishMsg(s.markerMsg(k, 0))
				}
			}
		}
	}
	return out, nil
}

// twins are the keys the write of entry e of l stored besides e: in the
// listing of the same status or creation by workflow, or in all.
func (l ixList) twins(e ixEntry, workflow string) []string {
	var keys []string
	switch {
	case !l.trie:
	case l.status == "":
		keys, _ = creationEntries(wfToken(workflow), e.ms, e.id, e.nonce)
	default:
		keys, _ = statusEntries(l.status, wfToken(workflow), e.ms, e.id, e.nonce)
	}
	return slices.DeleteFunc(keys, func(k string) bool { return k == e.key })
}

// entrySource yields the entries of a listing newest first, from a cursor.
type entrySource interface {
	// next returns up to n more entries, none when the listing is done.
	next(ctx context.Context, n int) ([]ixEntry, error)
}

// PageRuns reads one page of a listing (see the package doc, "Run
// indexes"): the entries of the page, newest first, and the records they
// name, read together (up to 1024 in one read). Entries no record names
// are skipped, so a page may take another round of entries.
func (s *Store) PageRuns(ctx context.Context, q checkpoint.PageQuery) (checkpoint.RunPage, error) {
	if err := q.Validate(); err != nil {
		return checkpoint.RunPage{}, fmt.Errorf("page runs: %w", err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = checkpoint.DefaultPageLimit
	}
	l := listOf(q.Status, q.Workflow)
	src := s.source(l, q.After)
	var got []listed
	seen := map[string]bool{}
	for len(got) <= limit {
		entries, err := src.next(ctx, limit+1-len(got))
		if err != nil {
			return checkpoint.RunPage{}, fmt.Errorf("page runs %+v: %w", q, err)
		}
		if len(entries) == 0 {
			break
		}
		found, err := s.resolve(ctx, l, entries, seen)
		if err != nil {
			return checkpoint.RunPage{}, fmt.Errorf("page runs %+v: %w", q, err)
		}
		got = append(got, found...)
	}
	var page checkpoint.RunPage
	if len(got) > limit {
		got = got[:limit]
		page.Next = got[limit-1].key
	}
	page.Runs = make([]checkpoint.Run, len(got))
	for i, g := range got {
		page.Runs[i] = g.run
	}
	return page, nil
}

// flatSource reads a live listing whole (the live runs of a status) and
// sorts it.
type flatSource struct {
	s       *Store
	l       ixList
	after   checkpoint.Cursor
	entries []ixEntry
	read    bool
}

func (f *flatSource) next(ctx context.Context, n int) ([]ixEntry, error) {
	if !f.read {
		f.read = true
		all, err := f.s.readEntries(ctx, f.l)
		if err != nil {
			return nil, err
		}
		for _, e := range all {
			if e.after(f.after) {
				f.entries = append(f.entries, e)
			}
		}
		sort.Slice(f.entries, func(i, j int) bool { return f.entries[i].before(f.entries[j]) })
	}
	n = min(n, len(f.entries))
	out := f.entries[:n]
	f.entries = f.entries[n:]
	return out, nil
}

// readLive reads the live listing of status st (workflow wf, when set),
// shard by shard. On the way it gives a marker that does not expire (one
// written before the stream allowed message TTLs) a TTL, so that the
// listing does not keep it.
func (s *Store) readLive(ctx context.Context, st checkpoint.Status, wf string) ([]ixMsg, error) {
	msgs, err := s.readSharded(ctx, liveFilters(string(st), wf))
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.marker && !m.ttl && s.ttl.Load() {
			_ = s.nc.PublishMsg(s.markerMsg(m.key, m.seq))
		}
	}
	return msgs, nil
}

// readEntries reads every entry of l: a live listing whole, a time
// listing down its trie.
func (s *Store) readEntries(ctx context.Context, l ixList) ([]ixEntry, error) {
	if l.trie {
		return s.source(l, checkpoint.Cursor{}).next(ctx, math.MaxInt)
	}
	msgs, err := s.readLive(ctx, l.status, l.workflow)
	if err != nil {
		return nil, err
	}
	entries := make([]ixEntry, 0, len(msgs))
	for _, m := range msgs {
		if e, ok := l.parse(m); ok {
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// trieSource walks a time listing down from its root, newest first: the
// children of each directory it enters, then a group of leaves at once,
// as many as the page still needs at the density seen so far. Its first
// read takes every directory on the path to the cursor (or, for a first
// page, to now) in one multi_last: where the listing has entries there,
// as an active listing does, the walk down needs no other directory read.
type trieSource struct {
	s     *Store
	l     ixList
	after checkpoint.Cursor
	// path holds the cursor's bucket at each level.
	path    [trieTop + 1]int64
	stack   []trieFrame
	started bool
	// dirs holds the children read ahead, by directory.
	dirs map[trieNode][]int64
	buf  []ixEntry
	// leaves and entries read so far, and the last group of leaves, for
	// the size of the next group.
	leaves, entries, group int
}

// trieNode is a directory: bucket b at level (trieTop+1: the root).
type trieNode struct {
	level int
	b     int64
}

// trieFrame is a directory being walked: its children at level (trieTop,
// under the root, to 0, the leaves), newest first.
type trieFrame struct {
	level int
	bs    []int64
	i     int
	// onPath: the directory is on the cursor's path, so its children
	// start at the cursor's.
	onPath bool
}

func (s *Store) source(l ixList, after checkpoint.Cursor) entrySource {
	if !l.trie {
		return &flatSource{s: s, l: l, after: after}
	}
	t := &trieSource{s: s, l: l, after: after}
	if !after.IsZero() {
		for k := range t.path {
			t.path[k] = bucket(after.At.UnixMilli(), k)
		}
	}
	return t
}

func (t *trieSource) next(ctx context.Context, n int) ([]ixEntry, error) {
	for len(t.buf) < n {
		if !t.started {
			t.started = true
			if err := t.readAhead(ctx); err != nil {
				return nil, err
			}
			if err := t.enter(ctx, trieTop+1, 0, !t.after.IsZero()); err != nil {
				return nil, err
			}
			continue
		}
		if len(t.stack) == 0 {
			break
		}
		f := &t.stack[len(t.stack)-1]
		if f.i == len(f.bs) {
			t.stack = t.stack[:len(t.stack)-1]
			continue
		}
		if f.level == 0 {
			if err := t.readLeaves(ctx, f, n-len(t.buf)); err != nil {
				return nil, err
			}
			continue
		}
		b := f.bs[f.i]
		f.i++
		if err := t.enter(ctx, f.level, b, f.onPath && b == t.path[f.level]); err != nil {
			return nil, err
		}
	}
	n = min(n, len(t.buf))
	out := t.buf[:n]
	t.buf = t.buf[n:]
	return out, nil
}

// readAhead reads the children of every directory on the path to the
// cursor, or to now, in one read.
func (t *trieSource) readAhead(ctx context.Context) error {
	ms := time.Now().UnixMilli()
	if !t.after.IsZero() {
		ms = t.after.At.UnixMilli()
	}
	filters := []string{t.l.dirFilter(trieTop+1, 0)}
	for k := trieTop; k > 0; k-- {
		filters = append(filters, t.l.dirFilter(k, bucket(ms, k)))
	}
	msgs, err := t.s.readLast(ctx, filters)
	if err != nil {
		return err
	}
	t.dirs = map[trieNode][]int64{}
	for _, f := range filters {
		t.dirs[t.nodeOf(f)] = nil // read: no child is an answer too
	}
	for _, m := range msgs {
		if node, child, ok := t.l.parseDir(m); ok {
			t.dirs[node] = append(t.dirs[node], child)
		}
	}
	return nil
}

// nodeOf is the directory whose children filter (a dirFilter) matches.
func (t *trieSource) nodeOf(filter string) trieNode {
	node, _, _ := t.l.parseDir(ixMsg{key: strings.TrimSuffix(filter, "*") + "0"})
	return node
}

// parseDir reads a directory key of l: the directory and the child it
// names.
func (l ixList) parseDir(m ixMsg) (trieNode, int64, bool) {
	rest, ok := strings.CutPrefix(m.key, l.prefix+".")
	if !ok || m.marker {
		return trieNode{}, 0, false
	}
	t := strings.Split(rest, ".")
	child, err := strconv.ParseInt(t[len(t)-1], 10, 64)
	switch {
	case err != nil:
		return trieNode{}, 0, false
	case len(t) == 2 && t[0] == "r":
		return trieNode{level: trieTop + 1}, child, true
	case len(t) == 3 && len(t[0]) == 2 && t[0][0] == 'd':
		k, err1 := strconv.Atoi(t[0][1:])
		b, err2 := strconv.ParseInt(t[1], 10, 64)
		if err1 != nil || err2 != nil {
			return trieNode{}, 0, false
		}
		return trieNode{level: k + 1, b: b}, child, true
	}
	return trieNode{}, 0, false
}

// enter walks the children of bucket b at level (trieTop+1: the root)
// next, read ahead or read now.
func (t *trieSource) enter(ctx context.Context, level int, b int64, onPath bool) error {
	children, ok := t.dirs[trieNode{level, b}]
	if !ok {
		msgs, err := t.s.readLast(ctx, []string{t.l.dirFilter(level, b)})
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if _, child, ok := t.l.parseDir(m); ok {
				children = append(children, child)
			}
		}
	}
	var bs []int64
	for _, c := range children {
		if !onPath || c <= t.path[level-1] {
			bs = append(bs, c)
		}
	}
	slices.Sort(bs)
	slices.Reverse(bs)
	t.stack = append(t.stack, trieFrame{level: level - 1, bs: bs, onPath: onPath})
	return nil
}

// maxLeafGroup bounds the leaves read at once.
const maxLeafGroup = 256

// readLeaves reads the next group of f's leaves: as many as hold need
// entries at the density read so far, fewer when they hold more than one
// read returns.
func (t *trieSource) readLeaves(ctx context.Context, f *trieFrame, need int) error {
	// The density seen so far, at most doubling the last group: a first
	// leaf that is nearly empty says little about the next ones.
	g, need := 1, min(need, 1<<20)
	if t.leaves > 0 {
		g = min(need*t.leaves/max(t.entries, 1)+1, 2*t.group)
	}
	g = min(g, maxLeafGroup, len(f.bs)-f.i)
	for {
		filters := make([]string, g)
		for k := range g {
			filters[k] = t.l.leafFilter(f.bs[f.i+k])
		}
		msgs, err := t.s.readLast(ctx, filters)
		if errors.Is(err, errTooMany) && g > 1 {
			g /= 2
			continue
		}
		if errors.Is(err, errTooMany) {
			msgs, err = t.s.readPrefix(ctx, filters[0])
		}
		if err != nil {
			return err
		}
		f.i += g
		var got []ixEntry
		for _, m := range msgs {
			if e, ok := t.l.parse(m); ok && e.after(t.after) {
				got = append(got, e)
			}
		}
		sort.Slice(got, func(i, j int) bool { return got[i].before(got[j]) })
		t.buf = append(t.buf, got...)
		t.leaves += g
		t.entries += len(got)
		t.group = g
		return nil
	}
}

// ListRuns returns the runs matching f, oldest first (by creation). A
// listing by status or workflow reads that listing of the index whole and
// the records it names: a live status costs the live runs of it, however
// many ended runs the bucket holds. A listing of every run reads every
// run record, with one watcher over run.*.
func (s *Store) ListRuns(ctx context.Context, f checkpoint.Filter) ([]checkpoint.Run, error) {
	var runs []checkpoint.Run
	switch {
	case f.Status == "" && f.Workflow == "":
		err := s.scan(ctx, "run.*", func(e jetstream.KeyValueEntry) error {
			run, err := decodeRun(e)
			if err != nil {
				return fmt.Errorf("%s: %w", e.Key(), err)
			}
			runs = append(runs, run)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
	case (f.Status != "" && !f.Status.Valid()) || (f.Workflow != "" && !checkpoint.ValidID(f.Workflow)):
		return nil, nil // no run has them
	default:
		l := listOf(f.Status, f.Workflow)
		entries, err := s.readEntries(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("list runs %+v: %w", f, err)
		}
		found, err := s.resolve(ctx, l, entries, map[string]bool{})
		if err != nil {
			return nil, fmt.Errorf("list runs %+v: %w", f, err)
		}
		for _, g := range found {
			runs = append(runs, g.run)
		}
	}
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].CreatedAt.Equal(runs[j].CreatedAt) {
			return runs[i].CreatedAt.Before(runs[j].CreatedAt)
		}
		return runs[i].ID < runs[j].ID
	})
	return runs, nil
}

var endedStatuses = []checkpoint.Status{checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead}

// CountRuns counts the index's entries, reading no run: the live ones
// (running, waiting) by reading their listing (the live runs, each
// entry's key names its status and workflow), the ended ones as the
// server counts the subjects of each listing by status and workflow
// (countPrefix), without sending them (BenchmarkListLive/CountRuns:
// about 0.4 µs an ended run on this project's test VM). A run that just left an ended
// status (a redriven dead run) is counted there too until the marker of
// its removed entry expires, about a second.
func (s *Store) CountRuns(ctx context.Context) (checkpoint.RunCounts, error) {
	c := checkpoint.RunCounts{Status: map[checkpoint.Status]int64{}, Workflow: map[string]map[checkpoint.Status]int64{}}
	var mu sync.Mutex
	add := func(wf string, st checkpoint.Status, n int64) {
		mu.Lock()
		defer mu.Unlock()
		if n == 0 {
			return
		}
		if wf == "" {
			c.Status[st] += n
			return
		}
		if c.Workflow[wf] == nil {
			c.Workflow[wf] = map[checkpoint.Status]int64{}
		}
		c.Workflow[wf][st] += n
	}
	fail := func(err error) (checkpoint.RunCounts, error) {
		return checkpoint.RunCounts{}, fmt.Errorf("count runs: %w", err)
	}
	live, err := s.readLive(ctx, "*", "")
	if err != nil {
		return fail(err)
	}
	seen := map[string]bool{}
	for _, m := range live {
		// <status>.<wf>.<h>.<ms>.<R>.<N>
		t := strings.Split(strings.TrimPrefix(m.key, ixPrefix+"l."), ".")
		if m.marker || len(t) != 6 || seen[t[0]+"."+t[4]] {
			continue
		}
		seen[t[0]+"."+t[4]] = true
		add("", checkpoint.Status(t[0]), 1)
		if t[1] != noWorkflow {
			add(t[1], checkpoint.Status(t[0]), 1)
		}
	}
	names, err := s.readSharded(ctx, []string{ixPrefix + "n.*"})
	if err != nil {
		return fail(err)
	}
	// Each ended status's total is the sum of its listings by workflow
	// (runs without one included): one count of each entry.
	type count struct {
		st checkpoint.Status
		wf string
	}
	var counts []count
	for _, st := range endedStatuses {
		counts = append(counts, count{st, noWorkflow})
		for _, m := range names {
			if !m.marker {
				counts = append(counts, count{st, strings.TrimPrefix(m.key, ixPrefix+"n.")})
			}
		}
	}
	err = parallel(len(counts), func(i int) error {
		n, err := s.countPrefix(ctx, statusList(counts[i].st, counts[i].wf).entryFilter())
		add("", counts[i].st, n)
		if counts[i].wf != noWorkflow {
			add(counts[i].wf, counts[i].st, n)
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	return c, nil
}
