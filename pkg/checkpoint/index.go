package checkpoint

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A store indexes its runs so that what lists and counts runs costs what
// the runs it returns cost, not what the store has ever held: by status,
// by workflow and by time, kept in the write that changes a run's status
// (see the stores' docs for how each keeps it atomic), with counters per
// status and workflow.
//
// A listing is newest first. An unfiltered listing, and one by workflow
// only, orders runs by creation; a listing by status orders them by when
// they took that status (the end, for an ended run), so that "completed"
// reads as most recently completed first.

// DefaultPageLimit is the page size of a PageQuery without a Limit.
const DefaultPageLimit = 50

// MaxPageLimit bounds a PageQuery's Limit.
const MaxPageLimit = 1000

// Cursor is a place in a listing: a run's, given by the time it entered
// that listing (milliseconds: its creation, or when it took the status the
// listing is of) and its id, which breaks ties. A page's Next is the
// cursor of its last run: pass it as the next query of the same listing's
// After (a cursor of another listing starts at a place that means nothing
// there).
type Cursor struct {
	At time.Time
	ID string
}

// IsZero reports whether c is the zero cursor (the start of a listing).
func (c Cursor) IsZero() bool { return c.ID == "" }

// String encodes c as "<unix ms>.<id>", which ParseCursor reads back.
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	return strconv.FormatInt(c.At.UnixMilli(), 10) + "." + c.ID
}

// ParseCursor reads what Cursor.String wrote; "" is the zero cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	ms, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 || !ValidID(id) {
		return Cursor{}, fmt.Errorf("cursor %q: want <unix ms>.<run id>, as a page's next cursor says", s)
	}
	return Cursor{At: time.UnixMilli(n).UTC(), ID: id}, nil
}

// PageQuery asks PageRuns for one page of runs, newest first.
type PageQuery struct {
	// Status keeps runs in this status; empty keeps every status.
	Status Status
	// Workflow keeps runs of this workflow; empty keeps every workflow.
	Workflow string
	// Limit is the page size, 1 to MaxPageLimit; 0 means DefaultPageLimit.
	Limit int
	// After starts the page after this cursor (the previous page's
	// Next); the zero cursor starts at the newest run.
	After Cursor
}

// Size is the page size q asks for: its Limit, or DefaultPageLimit.
func (q PageQuery) Size() int {
	if q.Limit == 0 {
		return DefaultPageLimit
	}
	return q.Limit
}

// Validate says what is wrong with q, or nil.
func (q PageQuery) Validate() error {
	if q.Status != "" && !q.Status.Valid() {
		return fmt.Errorf("unknown status %q (running, waiting, completed, failed, cancelled, dead)", q.Status)
	}
	if q.Workflow != "" && !ValidID(q.Workflow) {
		return fmt.Errorf("workflow %q: a workflow name is 1-128 letters, digits, '-' and '_'", q.Workflow)
	}
	if q.Limit < 0 || q.Limit > MaxPageLimit {
		return fmt.Errorf("limit %d: want 1-%d", q.Limit, MaxPageLimit)
	}
	return nil
}

// RunPage is one page of a listing.
type RunPage struct {
	// Runs newest first, at most the query's Limit.
	Runs []Run
	// Next is the cursor to ask the next page After; zero when this page
	// holds the last run of the listing.
	Next Cursor
}

// RunCounts are the counters of a store's index: how many runs it holds
// in each status, in all and per workflow. A status without runs may be
// absent.
type RunCounts struct {
	Status   map[Status]int64
	Workflow map[string]map[Status]int64
}

// Total is how many runs the counts hold.
func (c RunCounts) Total() int64 {
	var n int64
	for _, v := range c.Status {
		n += v
	}
	return n
}

// Statuses lists every status, live ones first: the order listings and
// counts show them in.
func Statuses() []Status {
	return []Status{StatusRunning, StatusWaiting, StatusCompleted, StatusFailed, StatusCancelled, StatusDead}
}

// IndexBackfill is what a store written before its run indexes existed
// offers to build them: the scheduler calls BackfillIndex at start until
// it reports Done. It is resumable (a crash loses no progress but the
// batch under way) and idempotent: a run indexed already, or indexed by
// a write since, is counted once.
type IndexBackfill interface {
	// BackfillIndex indexes up to batch runs that have no index entry
	// yet and says how far the backfill has come.
	BackfillIndex(ctx context.Context, batch int) (BackfillProgress, error)
}

// BackfillProgress is how far an index backfill has come.
type BackfillProgress struct {
	// Indexed is how many runs this call indexed.
	Indexed int
	// Remaining estimates the runs still to look at; -1 when unknown.
	Remaining int
	// Done: every run the store holds is indexed.
	Done bool
}
