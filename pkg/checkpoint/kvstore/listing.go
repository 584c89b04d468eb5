package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	rest, ok := l.cut(m.key)
	rest, entry := strings.CutPrefix(rest, "e.")
	ok, n := ok && entry, 4
	if !l.trie {
		rest, ok = strings.CutPrefix(m.key, ixPrefix+"l."+string(l.status)+".")
		n = 5
	}
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
// from before the index names any entry that fits it). A tombstone names
// none.
func (l ixList) names(e ixEntry, rec record) bool {
	if rec.tomb != nil {
		return false
	}
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
// The others are left to dropStale.
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
		s.dropStale(l, e, rec, ok, now)
	}
	return out, nil
}

// dropStale removes entry e of l, which rec (ok: there is a record) does
// not name, when no record will name it again (a write that was refused
// or crashed between its index writes and its record, a run that left
// the status and crashed before dropping the entry): when the record was
// written after the entry (a writer whose entry precedes its record write
// cannot win over a newer record), or the entry is older than staleAfter.
// It does not wait for the answer, and removes it by a marker conditional
// on its sequence, so that a later write of the key stays.
//
// The status entries of a purged run (its record a tombstone) stay: the
// purge removes them last, and EndedBefore finishes a purge that stopped
// from them.
func (s *Store) dropStale(l ixList, e ixEntry, rec record, ok bool, now time.Time) {
	if ok && rec.tomb != nil && l.trie && l.status != "" {
		return
	}
	if (ok && rec.run.Rev > e.seq) || now.Sub(e.at) > staleAfter {
		_ = s.nc.PublishMsg(s.markerMsg(e.key, e.seq))
	}
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
	limit := q.Size()
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
			if errors.Is(err, checkpoint.ErrPurged) {
				return nil // a tombstone
			}
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

// workflowNames are the workflows the names read (run.=ix.n.*) hold.
func workflowNames(names []ixMsg) []string {
	var wfs []string
	for _, m := range names {
		if !m.marker {
			wfs = append(wfs, strings.TrimPrefix(m.key, ixPrefix+"n."))
		}
	}
	return wfs
}

var endedStatuses = []checkpoint.Status{checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead}

// CountRuns counts the live runs (running, waiting) by reading their
// listing (each entry's key names its status and workflow), and reads
// the counts of the ended ones (counts.go): one read of the count keys,
// whatever the bucket holds. A run that just left a live status is
// counted there too until the marker of its removed entry expires,
// about a second; after a crash between its record and that marker,
// until a listing of the status reads the entry and removes it (the
// scheduler's repair lists the live runs). A crash there leaves the
// ended counts off too, until the recount (counts.go).
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
	ended, err := s.countEnded(ctx)
	if err != nil {
		return fail(err)
	}
	for p, n := range ended {
		st, wf, _ := strings.Cut(p, ".")
		if n <= 0 || p == tombPair {
			continue // drift a crash left, until the recount; the tombstones
		}
		add("", checkpoint.Status(st), n)
		if wf != noWorkflow {
			add(wf, checkpoint.Status(st), n)
		}
	}
	return c, nil
}
