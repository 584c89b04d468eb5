package kvstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// trieSource walks a time listing down from its root: newest first, from
// a cursor, or oldest first (EndedBefore), up to a bound. It reads the
// children of each directory it enters, then a group of leaves at once,
// as many as the page still needs at the density seen so far. Newest
// first, its first read takes the path to the cursor (or, for a first
// page, to now) in one multi_last: where the listing has entries there,
// as an active listing does, the walk down needs no other directory
// read. On that path it reads the directories of the young nodes (a
// level-2 node spans 65 s) whole, and of the older ones only the key
// naming the child on the path (and, to now, the next one): the other
// children of a node that spans 70 minutes or more were written all over
// the stream in that time, and a read of a key costs a load of the
// stream block that holds it (the server's block cache lasts 10 s). A
// directory read so is read whole only when the walk goes past the path
// (readRest). The walk to now takes entries stamped up to one sibling
// ahead of now (a writer's clock that runs ahead) in their order; one
// stamped further ahead comes after the path's entries.
//
// Directories are never removed by the writes of entries, so a listing
// whose old entries went (purged runs) would keep a trie of empty
// directories for every later walk to read. The walk removes them: a
// directory key (its parent's entry for a child) whose subtree it has
// read whole and found empty, when the subtree's time ended more than
// pruneAge ago, by a marker conditional on the sequence it read (see
// prune). A write of an entry writes the directory keys that name a node
// whose time ended rewriteAge ago again after the entry, whatever this
// process remembers (see plan), so that one the walk removes while the
// entry is being written is written again: the walk reads a directory
// key before the leaves under it, so either it sees the entry, or the
// writer's directory write comes after the sequence the marker expects,
// or after the marker. A node that ended less than rewriteAge ago is no
// walk's to remove (pruneAge).
type trieSource struct {
	s     *Store
	l     ixList
	after checkpoint.Cursor
	// asc: oldest first, entries before before (unix ms).
	asc    bool
	before int64
	// path holds the bound's bucket at each level (the cursor's, or the
	// last millisecond before before's); bounded: there is a bound.
	path    [trieTop + 1]int64
	bounded bool
	stack   []trieFrame
	started bool
	// dirs holds the children read ahead, by directory; pathOnly the
	// directories of which only the children on the path were read.
	dirs     map[trieNode][]trieChild
	pathOnly map[trieNode]bool
	buf      []ixEntry
	// leaves and entries read so far, and the last group of leaves, for
	// the size of the next group.
	leaves, entries, group int
	// pruneBefore: a subtree whose time ends before it (unix ms) may be
	// removed when found empty.
	pruneBefore int64
	// big is a leaf of more than 1024 entries being read oldest first.
	big *bigLeaf
}

// bigLeaf is a leaf of more than 1024 entries (a burst of runs ending in
// 16 ms) that an oldest-first walk reads a millisecond at a time, and
// within one in stream order, as many entries at a time as it needs:
// entries of one millisecond tie, and what a read costs grows with what
// it needs, not with the burst (EndedBefore reads the oldest entries
// again on every call, as the purges remove them). A newest-first walk
// reads such a leaf whole (readPrefix).
type bigLeaf struct {
	b0, ms int64
	// from is the stream sequence the next read of ms starts at.
	from uint64
}

// pruneAge is how old the end of an empty subtree's time must be for a
// walk to remove it; rewriteAge how old the end of a node's time must be
// for the write of an entry under it to write the key that names it
// again (plan). The difference covers the clocks of the processes.
const (
	pruneAge   = time.Hour
	rewriteAge = 10 * time.Minute
)

// trieNode is a directory: bucket b at level (trieTop+1: the root).
type trieNode struct {
	level int
	b     int64
}

// end is the end of the node's time (unix ms, exclusive).
func (n trieNode) end() int64 { return (n.b + 1) << trieShift[n.level] }

// trieChild is a child of a directory, as the directory keys that name
// it were read: one, or in a listing of every workflow one for each
// workflow whose trie has it.
type trieChild struct {
	b     int64
	names []dirName
}

// dirName is a directory key as read at sequence seq.
type dirName struct {
	key string
	seq uint64
}

// trieFrame is a directory being walked: its children at level (trieTop,
// under the root, to 0, the leaves), in the walk's order.
type trieFrame struct {
	level int
	bs    []trieChild
	i     int
	// onPath: the directory is on the bound's path, so its children
	// stop at the bound's.
	onPath bool
	// node is the directory, named in its parent by names (none: the
	// root).
	node  trieNode
	names []dirName
	// whole: bs holds every child of node; held: a child read holds an
	// entry, or was not read whole, or is too young to remove.
	whole, held bool
	// rest: bs holds only the children on the path, read ahead; the
	// others are read once the walk has taken those (readRest).
	rest bool
}

func (s *Store) source(l ixList, after checkpoint.Cursor) entrySource {
	if !l.trie {
		return &flatSource{s: s, l: l, after: after}
	}
	t := &trieSource{s: s, l: l, after: after, pruneBefore: time.Now().Add(-pruneAge).UnixMilli()}
	if !after.IsZero() {
		t.bounded = true
		for k := range t.path {
			t.path[k] = bucket(after.At.UnixMilli(), k)
		}
	}
	return t
}

// ascending walks the time listing l oldest first, the entries before
// before (unix ms).
func (s *Store) ascending(l ixList, before int64) *trieSource {
	t := &trieSource{s: s, l: l, asc: true, before: before, bounded: true, pruneBefore: time.Now().Add(-pruneAge).UnixMilli()}
	for k := range t.path {
		t.path[k] = bucket(before-1, k)
	}
	return t
}

func (t *trieSource) next(ctx context.Context, n int) ([]ixEntry, error) {
	for len(t.buf) < n {
		if !t.started {
			t.started = true
			if !t.asc {
				if err := t.readAhead(ctx); err != nil {
					return nil, err
				}
			}
			if err := t.enter(ctx, trieNode{level: trieTop + 1}, nil, t.bounded); err != nil {
				return nil, err
			}
			continue
		}
		if t.big != nil {
			if err := t.readBig(ctx, n-len(t.buf)); err != nil {
				return nil, err
			}
			continue
		}
		if len(t.stack) == 0 {
			break
		}
		f := &t.stack[len(t.stack)-1]
		if f.i == len(f.bs) && f.rest {
			if err := t.readRest(ctx, f); err != nil {
				return nil, err
			}
			continue
		}
		if f.i == len(f.bs) {
			t.pop()
			continue
		}
		if f.level == 0 {
			if err := t.readLeaves(ctx, f, n-len(t.buf)); err != nil {
				return nil, err
			}
			continue
		}
		c := f.bs[f.i]
		f.i++
		child := trieNode{level: f.level, b: c.b}
		if err := t.enter(ctx, child, c.names, f.onPath && c.b == t.path[f.level]); err != nil {
			return nil, err
		}
	}
	n = min(n, len(t.buf))
	out := t.buf[:n]
	t.buf = t.buf[n:]
	return out, nil
}

// pop leaves the directory walked whole: removed when nothing under it
// holds an entry, else its parent holds one.
func (t *trieSource) pop() {
	f := t.stack[len(t.stack)-1]
	t.stack = t.stack[:len(t.stack)-1]
	if len(f.names) > 0 && f.whole && !f.held && f.node.end() <= t.pruneBefore {
		t.prune(f.names)
		return
	}
	if len(t.stack) > 0 {
		t.stack[len(t.stack)-1].held = true
	}
}

// prune removes the directory keys names, each as read at its seq,
// without waiting for the answers (a reader without write permission
// only gets them refused): a marker conditional on seq, so that a
// directory written again since stays.
func (t *trieSource) prune(names []dirName) {
	for _, n := range names {
		_ = t.s.nc.PublishMsg(t.s.markerMsg(n.key, n.seq))
	}
}

// wholeBelow is the level of the youngest node whose directory the
// first read of a newest-first walk does not read whole (see trieSource):
// a level-3 node spans 70 minutes.
const wholeBelow = 3

// readAhead reads the path to the cursor, or to now, in one read: the
// directories of the nodes on it below wholeBelow whole, and in the
// others the keys naming the child on the path and, to now, the next.
func (t *trieSource) readAhead(ctx context.Context) error {
	ms := time.Now().UnixMilli()
	if !t.after.IsZero() {
		ms = t.after.At.UnixMilli()
	}
	t.dirs = map[trieNode][]trieChild{}
	t.pathOnly = map[trieNode]bool{}
	var filters []string
	for k := trieTop + 1; k > 0; k-- {
		node := trieNode{level: k}
		if k <= trieTop {
			node.b = bucket(ms, k)
		}
		t.dirs[node] = nil // read: no child is an answer too
		if k < wholeBelow {
			filters = append(filters, t.l.dirFilter(k, node.b))
			continue
		}
		t.pathOnly[node] = true
		child := bucket(ms, k-1)
		filters = append(filters, t.l.dirKey(k, node.b, child))
		if !t.bounded {
			filters = append(filters, t.l.dirKey(k, node.b, child+1))
		}
	}
	msgs, err := t.s.readLast(ctx, filters)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if node, child, ok := t.l.parseDir(m); ok {
			t.dirs[node] = addChild(t.dirs[node], child, m)
		}
	}
	return nil
}

// readRest reads the directory of f, of which only the children on the
// path were read ahead, and goes on with the others, newest first.
func (t *trieSource) readRest(ctx context.Context, f *trieFrame) error {
	children, err := t.children(ctx, f.node)
	if err != nil {
		return err
	}
	walked := f.bs
	f.bs, f.i, f.rest, f.whole = nil, 0, false, true
	for _, c := range children {
		switch {
		case slices.ContainsFunc(walked, func(w trieChild) bool { return w.b == c.b }):
		case f.onPath && c.b > t.path[f.level]:
			f.whole = false
		default:
			f.bs = append(f.bs, c)
		}
	}
	slices.SortFunc(f.bs, func(a, b trieChild) int { return cmp.Compare(b.b, a.b) })
	return nil
}

// children reads the children of node.
func (t *trieSource) children(ctx context.Context, node trieNode) ([]trieChild, error) {
	msgs, err := t.s.readLast(ctx, []string{t.l.dirFilter(node.level, node.b)})
	if err != nil {
		return nil, err
	}
	var children []trieChild
	for _, m := range msgs {
		if _, child, ok := t.l.parseDir(m); ok {
			children = addChild(children, child, m)
		}
	}
	return children, nil
}

// parseDir reads a directory key of l: the directory and the child it
// names.
func (l ixList) parseDir(m ixMsg) (trieNode, int64, bool) {
	rest, ok := l.cut(m.key)
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

// addChild adds the directory key m, which names child b, to children.
func addChild(children []trieChild, b int64, m ixMsg) []trieChild {
	name := dirName{m.key, m.seq}
	for i := range children {
		if children[i].b == b {
			children[i].names = append(children[i].names, name)
			return children
		}
	}
	return append(children, trieChild{b, []dirName{name}})
}

// enter walks the children of node next, read ahead or read now; names
// name node in its parent.
func (t *trieSource) enter(ctx context.Context, node trieNode, names []dirName, onPath bool) error {
	children, ok := t.dirs[node]
	if !ok {
		var err error
		if children, err = t.children(ctx, node); err != nil {
			return err
		}
	}
	rest := ok && t.pathOnly[node]
	f := trieFrame{level: node.level - 1, onPath: onPath, node: node, names: names, whole: !rest, rest: rest}
	for _, c := range children {
		if onPath && c.b > t.path[node.level-1] {
			f.whole = false
			continue
		}
		f.bs = append(f.bs, c)
	}
	slices.SortFunc(f.bs, func(a, b trieChild) int {
		if t.asc {
			return cmp.Compare(a.b, b.b)
		}
		return cmp.Compare(b.b, a.b)
	})
	t.stack = append(t.stack, f)
	return nil
}

// readBig reads the next entries of t.big, up to need (at least 64) of
// one millisecond, and moves to the next millisecond once one is read.
func (t *trieSource) readBig(ctx context.Context, need int) error {
	b := t.big
	if b.ms >= (b.b0+1)<<trieShift[0] || b.ms >= t.before {
		t.big = nil
		return nil
	}
	filter := t.l.prefix + ".e." + itoa(b.b0) + "." + itoa(b.ms) + ".>"
	msgs, next, more, err := t.s.readFrom(ctx, filter, b.from, max(need, 64))
	if err != nil {
		return err
	}
	var got []ixEntry
	for _, m := range msgs {
		if e, ok := t.l.parse(m); ok {
			got = append(got, e)
		}
	}
	sort.Slice(got, func(i, j int) bool { return earlier(got[i], got[j]) })
	t.buf = append(t.buf, got...)
	if b.from = next; !more {
		b.ms, b.from = b.ms+1, 0
	}
	return nil
}

// maxLeafGroup bounds the leaves read at once.
const maxLeafGroup = 256

// readLeaves reads the next group of f's leaves: as many as hold need
// entries at the density read so far, fewer when they hold more than one
// read returns. A leaf that holds no entry is removed (when old enough).
func (t *trieSource) readLeaves(ctx context.Context, f *trieFrame, need int) error {
	// The density seen so far, at most doubling the last group: a first
	// leaf that is nearly empty says little about the next ones.
	g, need := 1, min(need, 1<<20)
	if t.leaves > 0 {
		g = min(need*t.leaves/max(t.entries, 1)+1, 2*t.group)
	}
	g = min(g, maxLeafGroup, len(f.bs)-f.i)
	for {
		leaves := f.bs[f.i : f.i+g]
		filters := make([]string, g)
		for k, c := range leaves {
			filters[k] = t.l.leafFilter(c.b)
		}
		msgs, err := t.s.readLast(ctx, filters)
		if errors.Is(err, errTooMany) && g > 1 {
			g /= 2
			continue
		}
		if errors.Is(err, errTooMany) && t.asc && t.s.batchReads() {
			f.i++
			f.held = true
			t.big = &bigLeaf{b0: leaves[0].b, ms: leaves[0].b << trieShift[0]}
			return nil
		}
		if errors.Is(err, errTooMany) {
			msgs, err = t.s.readPrefix(ctx, filters[0])
		}
		if err != nil {
			return err
		}
		f.i += g
		held := map[int64]bool{}
		var got []ixEntry
		for _, m := range msgs {
			if m.marker {
				continue
			}
			e, ok := t.l.parse(m)
			if !ok {
				f.held = true // not an entry: keep the directory
				continue
			}
			held[bucket(e.ms, 0)] = true
			if (t.asc && e.ms < t.before) || (!t.asc && e.after(t.after)) {
				got = append(got, e)
			}
		}
		for _, c := range leaves {
			if !held[c.b] && (trieNode{0, c.b}).end() <= t.pruneBefore {
				t.prune(c.names)
			} else {
				f.held = true
			}
		}
		sort.Slice(got, func(i, j int) bool {
			if t.asc {
				return earlier(got[i], got[j])
			}
			return got[i].before(got[j])
		})
		t.buf = append(t.buf, got...)
		t.leaves += g
		t.entries += len(got)
		t.group = g
		return nil
	}
}
