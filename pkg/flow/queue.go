package flow

import (
	"slices"
	"sort"
)

// fairQueue holds the callers waiting for one limit's slots: by priority,
// higher first, and within a priority round-robin between fairness keys
// and in order within a key.
type fairQueue struct {
	levels map[int]*keyRing
	// prios are the priorities with callers waiting, highest first.
	prios []int
	n     int
}

func (q *fairQueue) len() int { return q.n }

func (q *fairQueue) push(w *waiter) {
	if q.levels == nil {
		q.levels = map[int]*keyRing{}
	}
	lv := q.levels[w.prio]
	if lv == nil {
		lv = &keyRing{}
		q.levels[w.prio] = lv
		i := sort.Search(len(q.prios), func(i int) bool { return q.prios[i] < w.prio })
		q.prios = slices.Insert(q.prios, i, w.prio)
	}
	lv.push(w)
	q.n++
}

// pop takes the next caller: of the highest priority, the first of the
// next key in turn.
func (q *fairQueue) pop() *waiter {
	prio := q.prios[0]
	lv := q.levels[prio]
	w := lv.pop()
	q.n--
	if lv.len() == 0 {
		delete(q.levels, prio)
		q.prios = q.prios[1:]
	}
	return w
}

// remove takes w out of the queue, wherever it is.
func (q *fairQueue) remove(w *waiter) {
	lv := q.levels[w.prio]
	if lv == nil {
		return
	}
	before := lv.len()
	lv.remove(w)
	q.n -= before - lv.len()
	if lv.len() == 0 {
		delete(q.levels, w.prio)
		q.prios = slices.DeleteFunc(q.prios, func(p int) bool { return p == w.prio })
	}
}

// keyRing holds the callers of one priority waiting for a limit's
// slots: a FIFO per fairness key, and the keys in a ring served in turn.
type keyRing struct {
	keys map[string][]*waiter
	ring []string
	next int
	n    int
}

func (q *keyRing) len() int { return q.n }

func (q *keyRing) push(w *waiter) {
	if q.keys == nil {
		q.keys = map[string][]*waiter{}
	}
	ws, ok := q.keys[w.key]
	if !ok {
		q.ring = append(q.ring, w.key)
	}
	q.keys[w.key] = append(ws, w)
	q.n++
}

// pop takes the first caller of the next key in turn.
func (q *keyRing) pop() *waiter {
	i := q.next % len(q.ring)
	key := q.ring[i]
	ws := q.keys[key]
	w := ws[0]
	ws[0] = nil
	q.take(key, i, ws[1:])
	return w
}

// remove takes w out of the queue, wherever it is, leaving the turn
// where it was.
func (q *keyRing) remove(w *waiter) {
	ws := q.keys[w.key]
	j := slices.Index(ws, w)
	i := slices.Index(q.ring, w.key)
	if j < 0 || i < 0 {
		return
	}
	turn := q.next
	rest := append(ws[:j:j], ws[j+1:]...)
	q.take(w.key, i, rest)
	if len(rest) == 0 && turn > i {
		turn--
	}
	q.next = turn
	if len(q.ring) == 0 {
		q.next = 0
	}
}

// take stores key's callers left (rest) after one was taken from it;
// key is at ring[i]. The turn goes to the key after it.
func (q *keyRing) take(key string, i int, rest []*waiter) {
	q.n--
	if len(rest) > 0 {
		q.keys[key] = rest
		q.next = i + 1
		return
	}
	delete(q.keys, key)
	q.ring = append(q.ring[:i], q.ring[i+1:]...)
	q.next = i
	if len(q.ring) == 0 {
		q.ring, q.next = nil, 0
	}
}
