package checkpointtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// The run indexes (checkpoint/index.go): PageRuns, ListRuns by status and
// CountRuns. Runs are created an hour in the past with CreatedAt a
// millisecond apart, so that creation orders them; a status change takes
// the time of the change (UpdatedAt is set to now, and the store may use
// its own clock), so every test sleeps 2ms after one (moveTo, commitTo)
// to give the next a later millisecond.

// runAt is newRun(id) of workflow wf, in status st, created at created.
func runAt(id, wf string, st checkpoint.Status, created time.Time) checkpoint.Run {
	r := newRun(id)
	r.Workflow, r.Status, r.CreatedAt, r.UpdatedAt = wf, st, created, created
	return r
}

// past is an hour ago: the creation time of a test's first run.
func past() time.Time { return time.Now().UTC().Add(-time.Hour) }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// moveTo sets run id's status with UpdateRun, as a decision, an expiry,
// a cancel or a redrive does.
func moveTo(t *testing.T, s checkpoint.Store, id string, st checkpoint.Status) checkpoint.Run {
	t.Helper()
	r := mustGet(t, s, id)
	r.Status, r.UpdatedAt = st, time.Now().UTC()
	got, err := s.UpdateRun(ctx(t), r)
	if err != nil {
		t.Fatalf("UpdateRun(%s to %s): %v", id, st, err)
	}
	time.Sleep(2 * time.Millisecond)
	return got
}

// commitTo commits the step at run id's cursor, the run taking status st
// with it, as a worker does when a step parks, ends or kills the run.
func commitTo(t *testing.T, s checkpoint.Store, id string, st checkpoint.Status) checkpoint.Run {
	t.Helper()
	r := mustGet(t, s, id)
	now := time.Now().UTC()
	cp := checkpoint.Checkpoint{RunID: id, Step: r.Step, Name: r.StepName, State: json.RawMessage(`{}`), Status: st, Gen: r.Resumes, Attempt: 1, At: now}
	next := r
	next.Status, next.UpdatedAt, next.Steps = st, now, r.Steps+1
	// The cursor moves on even when the run ends, so that a redriven run
	// commits a step of its own.
	next.Step, next.StepName = r.Step+1, fmt.Sprintf("step-%d", r.Step+1)
	if !st.Terminal() {
		cp.Next = next.StepName
	}
	got := mustCommit(t, s, next, cp)
	time.Sleep(2 * time.Millisecond)
	return got
}

// page reads one page of q and checks what every page must hold: at most
// the limit, each run whole and at its stored revision.
func page(t *testing.T, s checkpoint.Store, q checkpoint.PageQuery) checkpoint.RunPage {
	t.Helper()
	p, err := s.PageRuns(ctx(t), q)
	if err != nil {
		t.Fatalf("PageRuns(%+v): %v", q, err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = checkpoint.DefaultPageLimit
	}
	if len(p.Runs) > limit {
		t.Fatalf("PageRuns(%+v) returned %d runs, over the limit %d", q, len(p.Runs), limit)
	}
	for _, r := range p.Runs {
		stored := mustGet(t, s, r.ID)
		sameRun(t, fmt.Sprintf("PageRuns(%+v) run %s", q, r.ID), r, stored)
		if r.Rev != stored.Rev {
			t.Fatalf("PageRuns(%+v) returned %s at rev %d, stored at %d", q, r.ID, r.Rev, stored.Rev)
		}
	}
	return p
}

func runIDs(runs []checkpoint.Run) string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return strings.Join(ids, " ")
}

// pageAll reads the whole listing of q page by page, passing each page's
// Next on as its cursor string (as a CLI or an HTTP client would), and
// returns the ids in order and the size of each page. A run listed
// twice, a Next set on the last page or missing before it fails.
func pageAll(t *testing.T, s checkpoint.Store, q checkpoint.PageQuery) (string, []int) {
	t.Helper()
	var ids []string
	var sizes []int
	seen := map[string]bool{}
	for range 100 {
		p := page(t, s, q)
		sizes = append(sizes, len(p.Runs))
		for _, r := range p.Runs {
			if seen[r.ID] {
				t.Fatalf("PageRuns(%+v) lists %s a second time (pages so far %v: %s)", q, r.ID, sizes, strings.Join(ids, " "))
			}
			seen[r.ID] = true
			ids = append(ids, r.ID)
		}
		if p.Next.IsZero() {
			return strings.Join(ids, " "), sizes
		}
		if len(p.Runs) == 0 {
			t.Fatalf("PageRuns(%+v): an empty page with Next %v", q, p.Next)
		}
		if last := p.Runs[len(p.Runs)-1]; p.Next.ID != last.ID {
			t.Fatalf("PageRuns(%+v): Next %v, want the key of the page's last run %s", q, p.Next, last.ID)
		}
		after, err := checkpoint.ParseCursor(p.Next.String())
		if err != nil {
			t.Fatalf("ParseCursor(%q): %v", p.Next.String(), err)
		}
		q.After = after
	}
	t.Fatalf("PageRuns(%+v): more than 100 pages", q)
	return "", nil
}

// testPageRunsNewestFirst: every filter lists newest first, created out of
// order: by creation without a status, by when the run took its status
// with one (for a run created in it, its creation).
func testPageRunsNewestFirst(t *testing.T, s checkpoint.Store) {
	t0 := past()
	for _, r := range []struct {
		id, wf string
		st     checkpoint.Status
		at     int
	}{
		{"n3", "claim", checkpoint.StatusRunning, 3},
		{"n0", "claim", checkpoint.StatusCompleted, 0},
		{"n5", "refund", checkpoint.StatusWaiting, 5},
		{"n1", "refund", checkpoint.StatusRunning, 1},
		{"n4", "claim", checkpoint.StatusFailed, 4},
		{"n2", "refund", checkpoint.StatusCompleted, 2},
	} {
		mustCreate(t, s, runAt(r.id, r.wf, r.st, t0.Add(ms(r.at))))
	}
	for _, tc := range []struct {
		q    checkpoint.PageQuery
		want string
	}{
		{checkpoint.PageQuery{}, "n5 n4 n3 n2 n1 n0"},
		{checkpoint.PageQuery{Workflow: "claim"}, "n4 n3 n0"},
		{checkpoint.PageQuery{Workflow: "refund"}, "n5 n2 n1"},
		{checkpoint.PageQuery{Status: checkpoint.StatusRunning}, "n3 n1"},
		{checkpoint.PageQuery{Status: checkpoint.StatusWaiting}, "n5"},
		{checkpoint.PageQuery{Status: checkpoint.StatusCompleted}, "n2 n0"},
		{checkpoint.PageQuery{Status: checkpoint.StatusFailed}, "n4"},
		{checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Workflow: "refund"}, "n2"},
		{checkpoint.PageQuery{Status: checkpoint.StatusRunning, Workflow: "claim"}, "n3"},
		{checkpoint.PageQuery{Status: checkpoint.StatusWaiting, Workflow: "claim"}, ""},
		{checkpoint.PageQuery{Status: checkpoint.StatusDead}, ""},
		{checkpoint.PageQuery{Workflow: "nope"}, ""},
	} {
		p := page(t, s, tc.q)
		if got := runIDs(p.Runs); got != tc.want {
			t.Errorf("PageRuns(%+v) = %q, want %q", tc.q, got, tc.want)
		}
		if !p.Next.IsZero() {
			t.Errorf("PageRuns(%+v): Next %v on the only page", tc.q, p.Next)
		}
	}
}

// testPageRunsStatusTime: a listing by status orders by when the run took
// the status, not by creation: a, b, c created in that order and completed
// as b, c, a list as a c b among the completed, and a run that goes back
// to running lists first among the running.
func testPageRunsStatusTime(t *testing.T, s checkpoint.Store) {
	t0 := past()
	for i, id := range []string{"a", "b", "c", "d", "e", "f"} {
		mustCreate(t, s, runAt(id, "claim", checkpoint.StatusRunning, t0.Add(ms(i))))
	}
	moveTo(t, s, "b", checkpoint.StatusCompleted)
	commitTo(t, s, "c", checkpoint.StatusCompleted)
	moveTo(t, s, "a", checkpoint.StatusCompleted)
	commitTo(t, s, "d", checkpoint.StatusWaiting)
	moveTo(t, s, "d", checkpoint.StatusRunning)
	moveTo(t, s, "e", checkpoint.StatusWaiting)
	for _, tc := range []struct {
		q    checkpoint.PageQuery
		want string
	}{
		{checkpoint.PageQuery{Status: checkpoint.StatusCompleted}, "a c b"},
		{checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Workflow: "claim"}, "a c b"},
		{checkpoint.PageQuery{Status: checkpoint.StatusRunning}, "d f"},
		{checkpoint.PageQuery{Status: checkpoint.StatusWaiting}, "e"},
		{checkpoint.PageQuery{}, "f e d c b a"},
		{checkpoint.PageQuery{Workflow: "claim"}, "f e d c b a"},
	} {
		if got := runIDs(page(t, s, tc.q).Runs); got != tc.want {
			t.Errorf("PageRuns(%+v) = %q, want %q", tc.q, got, tc.want)
		}
	}
	// Paging by status time: the cursor is the status time, not the
	// creation.
	if got, sizes := pageAll(t, s, checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Limit: 1}); got != "a c b" || len(sizes) != 3 {
		t.Errorf("completed one by one = %q in pages %v, want \"a c b\" in 3", got, sizes)
	}
}

// testPageRunsCreatedInStatus: a run created in a status (an import, a
// copy) took it at its UpdatedAt, as every later write's status does: x,
// created before y but updated after it, lists first among the completed,
// and ends after y for retention.
func testPageRunsCreatedInStatus(t *testing.T, s checkpoint.Store) {
	t0 := past()
	x := runAt("x", "claim", checkpoint.StatusCompleted, t0)
	x.UpdatedAt = t0.Add(ms(20))
	mustCreate(t, s, x)
	mustCreate(t, s, runAt("y", "claim", checkpoint.StatusCompleted, t0.Add(ms(10))))
	if got := runIDs(page(t, s, checkpoint.PageQuery{Status: checkpoint.StatusCompleted}).Runs); got != "x y" {
		t.Errorf("completed = %q, want \"x y\" (x completed at its UpdatedAt, after y)", got)
	}
	if got := runIDs(page(t, s, checkpoint.PageQuery{}).Runs); got != "y x" {
		t.Errorf("every run = %q, want \"y x\" (by creation)", got)
	}
	if r, ok := s.(checkpoint.Retention); ok {
		ended, err := r.EndedBefore(ctx(t), t0.Add(ms(15)), 10)
		if err != nil || runIDs(ended) != "y" {
			t.Errorf("EndedBefore(t0+15ms) = %q, %v; want y only", runIDs(ended), err)
		}
	}
}

// testPageRunsPaging: paging through with each page's Next lists every
// run once, in order, with Next zero on the last page only (also when the
// last page is full).
func testPageRunsPaging(t *testing.T, s checkpoint.Store) {
	t0 := past()
	var all, claim, completed, refundRunning []string
	for i := 22; i >= 0; i-- { // newest first, the order of the listings
		id := fmt.Sprintf("pg-%02d", i)
		wf, st := "claim", checkpoint.StatusRunning
		if i%2 == 1 {
			wf = "refund"
		}
		if i%3 == 0 {
			st = checkpoint.StatusCompleted
		}
		all = append(all, id)
		switch {
		case wf == "claim":
			claim = append(claim, id)
		case st == checkpoint.StatusRunning:
			refundRunning = append(refundRunning, id)
		}
		if st == checkpoint.StatusCompleted {
			completed = append(completed, id)
		}
	}
	// Created oldest first but for a few, so that neither order of
	// insertion nor of ids is what a listing shows.
	for _, i := range []int{5, 0, 1, 22, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21} {
		wf, st := "claim", checkpoint.StatusRunning
		if i%2 == 1 {
			wf = "refund"
		}
		if i%3 == 0 {
			st = checkpoint.StatusCompleted
		}
		mustCreate(t, s, runAt(fmt.Sprintf("pg-%02d", i), wf, st, t0.Add(ms(i))))
	}
	for _, tc := range []struct {
		q     checkpoint.PageQuery
		want  []string
		sizes string
	}{
		{checkpoint.PageQuery{Limit: 5}, all, "[5 5 5 5 3]"},
		{checkpoint.PageQuery{Workflow: "claim", Limit: 4}, claim, "[4 4 4]"},
		{checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Limit: 3}, completed, "[3 3 2]"},
		{checkpoint.PageQuery{Status: checkpoint.StatusRunning, Workflow: "refund", Limit: 2}, refundRunning, "[2 2 2 1]"},
		{checkpoint.PageQuery{Limit: 23}, all, "[23]"},
	} {
		got, sizes := pageAll(t, s, tc.q)
		if want := strings.Join(tc.want, " "); got != want || fmt.Sprint(sizes) != tc.sizes {
			t.Errorf("PageRuns(%+v) paged = %q in pages %v, want %q in pages %s", tc.q, got, sizes, want, tc.sizes)
		}
	}
	// Next is the key of the page's last run: its creation in a listing by
	// creation, in milliseconds.
	p := page(t, s, checkpoint.PageQuery{Limit: 2})
	if want := t0.Add(ms(21)); p.Next.ID != "pg-21" || p.Next.At.UnixMilli() != want.UnixMilli() {
		t.Errorf("first page of 2: Next = %v (%d ms), want pg-21 at %d ms", p.Next, p.Next.At.UnixMilli(), want.UnixMilli())
	}
}

// testPageRunsAcrossTime: runs spread from three years ago to half a
// minute ahead of now (a writer's clock that runs ahead) list newest
// first, page after page, whatever the store does with time (the KV
// store keeps a time trie whose nodes span 16 ms to 199 days, and reads
// only the path to now of the old ones ahead).
func testPageRunsAcrossTime(t *testing.T, s checkpoint.Store) {
	now := time.Now().UTC()
	var all, done []string
	for i, d := range []time.Duration{
		-30 * time.Second, 0, 2 * time.Second, 90 * time.Second, 2 * time.Hour, 75 * time.Hour,
		4 * 24 * time.Hour, 100 * 24 * time.Hour, 300 * 24 * time.Hour, 3 * 365 * 24 * time.Hour,
	} {
		id := fmt.Sprintf("span-%02d", i)
		st := checkpoint.StatusRunning
		if i%2 == 1 {
			st = checkpoint.StatusCompleted
			done = append(done, id)
		}
		all = append(all, id)
		mustCreate(t, s, runAt(id, "span", st, now.Add(-d)))
	}
	for _, q := range []checkpoint.PageQuery{
		{Limit: 1}, {Limit: 2}, {Limit: 3}, {Limit: 50}, {Workflow: "span", Limit: 1},
		{Status: checkpoint.StatusCompleted, Limit: 1}, {Status: checkpoint.StatusCompleted, Workflow: "span", Limit: 2},
	} {
		want := all
		if q.Status != "" {
			want = done
		}
		if got, sizes := pageAll(t, s, q); got != strings.Join(want, " ") {
			t.Errorf("PageRuns(%+v) paged = %q in pages %v, want %q", q, got, sizes, strings.Join(want, " "))
		}
	}
}

// testPageRunsTies: runs that entered a listing in the same millisecond
// are ordered by id, newest first meaning the greater id first, and a
// cursor in the middle of them goes on after its own run.
func testPageRunsTies(t *testing.T, s checkpoint.Store) {
	at := past()
	for _, id := range []string{"tie-c", "tie-a", "tie-e", "tie-b", "tie-d"} {
		mustCreate(t, s, runAt(id, "ties", checkpoint.StatusRunning, at))
	}
	mustCreate(t, s, runAt("tie-0", "ties", checkpoint.StatusRunning, at.Add(-time.Millisecond)))
	got, sizes := pageAll(t, s, checkpoint.PageQuery{Workflow: "ties", Limit: 2})
	if want := "tie-e tie-d tie-c tie-b tie-a tie-0"; got != want || fmt.Sprint(sizes) != "[2 2 2]" {
		t.Errorf("ties paged by 2 = %q in pages %v, want %q in [2 2 2]", got, sizes, want)
	}
	if got, _ := pageAll(t, s, checkpoint.PageQuery{Status: checkpoint.StatusRunning, Workflow: "ties", Limit: 4}); got != "tie-e tie-d tie-c tie-b tie-a tie-0" {
		t.Errorf("running ties paged by 4 = %q", got)
	}
}

// testPageRunsLimit: Limit 0 is DefaultPageLimit, MaxPageLimit is taken.
func testPageRunsLimit(t *testing.T, s checkpoint.Store) {
	t0 := past()
	n := checkpoint.DefaultPageLimit + 5
	for i := range n {
		mustCreate(t, s, runAt(fmt.Sprintf("lim-%02d", i), "claim", checkpoint.StatusCompleted, t0.Add(ms(i))))
	}
	p := page(t, s, checkpoint.PageQuery{})
	if len(p.Runs) != checkpoint.DefaultPageLimit || p.Runs[0].ID != fmt.Sprintf("lim-%02d", n-1) || p.Next.ID != "lim-05" {
		t.Fatalf("PageRuns without a limit: %d runs from %s, Next %v; want %d from lim-%02d, Next lim-05",
			len(p.Runs), p.Runs[0].ID, p.Next, checkpoint.DefaultPageLimit, n-1)
	}
	rest := page(t, s, checkpoint.PageQuery{After: p.Next})
	if got := runIDs(rest.Runs); got != "lim-04 lim-03 lim-02 lim-01 lim-00" || !rest.Next.IsZero() {
		t.Fatalf("second page = %q, Next %v; want lim-04..lim-00 and no Next", got, rest.Next)
	}
	if p := page(t, s, checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Limit: checkpoint.MaxPageLimit}); len(p.Runs) != n || !p.Next.IsZero() {
		t.Fatalf("PageRuns(limit %d) = %d runs, Next %v; want all %d, no Next", checkpoint.MaxPageLimit, len(p.Runs), p.Next, n)
	}
	if p := page(t, s, checkpoint.PageQuery{Limit: 1}); runIDs(p.Runs) != fmt.Sprintf("lim-%02d", n-1) || p.Next.ID != p.Runs[0].ID {
		t.Fatalf("PageRuns(limit 1) = %q, Next %v", runIDs(p.Runs), p.Next)
	}
}

// testPageRunsInvalid: an invalid query is refused before the store is
// read: with a cancelled context, the answer is the query's fault, not
// the context's.
func testPageRunsInvalid(t *testing.T, s checkpoint.Store) {
	mustCreate(t, s, runAt("inv-1", "claim", checkpoint.StatusRunning, past()))
	cancelled, cancel := context.WithCancel(ctx(t))
	cancel()
	if _, err := s.PageRuns(cancelled, checkpoint.PageQuery{}); err == nil {
		t.Fatal("PageRuns with a cancelled context succeeded: the checks below would prove nothing")
	}
	for _, q := range []checkpoint.PageQuery{
		{Status: "nope"},
		{Status: "Running"},
		{Workflow: "a.b"},
		{Workflow: "claim>"},
		{Workflow: strings.Repeat("w", 129)},
		{Limit: -1},
		{Limit: checkpoint.MaxPageLimit + 1},
	} {
		p, err := s.PageRuns(cancelled, q)
		if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), q.Validate().Error()) {
			t.Errorf("PageRuns(%+v) = %v; want the query refused (%v) before any read", q, err, q.Validate())
		}
		if len(p.Runs) != 0 || !p.Next.IsZero() {
			t.Errorf("PageRuns(%+v) refused but returned %d runs, Next %v", q, len(p.Runs), p.Next)
		}
	}
}

// wantLists checks ListRuns for every status (and each with workflow wf)
// against want (status -> ids oldest first), the runs against their
// records, and that PageRuns lists the same runs.
func wantLists(t *testing.T, s checkpoint.Store, what string, want map[checkpoint.Status]string) {
	t.Helper()
	for _, st := range checkpoint.Statuses() {
		runs, err := s.ListRuns(ctx(t), checkpoint.Filter{Status: st})
		if err != nil {
			t.Fatalf("%s: ListRuns(%s): %v", what, st, err)
		}
		if got := runIDs(runs); got != want[st] {
			t.Errorf("%s: ListRuns(%s) = %q, want %q", what, st, got, want[st])
		}
		for _, r := range runs {
			stored := mustGet(t, s, r.ID)
			if r.Status != st || r.Rev != stored.Rev {
				t.Errorf("%s: ListRuns(%s) returned %s %s at rev %d, stored %s at rev %d", what, st, r.ID, r.Status, r.Rev, stored.Status, stored.Rev)
			}
		}
		p := page(t, s, checkpoint.PageQuery{Status: st})
		if got, want := sortedIDs(p.Runs), sortedIDs(runs); got != want {
			t.Errorf("%s: PageRuns(%s) = %q, ListRuns %q", what, st, got, want)
		}
	}
}

func sortedIDs(runs []checkpoint.Run) string {
	ids := strings.Fields(runIDs(runs))
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[j] < ids[i] {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	return strings.Join(ids, " ")
}

// testListRunsTransitions: ListRuns by status follows the records through
// status changes by UpdateRun and by Commit.
func testListRunsTransitions(t *testing.T, s checkpoint.Store) {
	t0 := past()
	mustCreate(t, s, runAt("x", "claim", checkpoint.StatusRunning, t0))
	mustCreate(t, s, runAt("y", "refund", checkpoint.StatusRunning, t0.Add(ms(1))))
	mustCreate(t, s, runAt("z", "refund", checkpoint.StatusRunning, t0.Add(ms(2))))
	R, W, C := checkpoint.StatusRunning, checkpoint.StatusWaiting, checkpoint.StatusCompleted
	wantLists(t, s, "created", map[checkpoint.Status]string{R: "x y z"})
	commitTo(t, s, "x", W)
	wantLists(t, s, "x parked by a commit", map[checkpoint.Status]string{R: "y z", W: "x"})
	moveTo(t, s, "x", R)
	wantLists(t, s, "x resumed by an update", map[checkpoint.Status]string{R: "x y z"})
	moveTo(t, s, "x", W)
	moveTo(t, s, "x", R)
	commitTo(t, s, "x", C)
	wantLists(t, s, "x completed by a commit", map[checkpoint.Status]string{R: "y z", C: "x"})
	moveTo(t, s, "y", checkpoint.StatusCancelled)
	commitTo(t, s, "z", checkpoint.StatusDead)
	wantLists(t, s, "y cancelled, z dead", map[checkpoint.Status]string{C: "x", checkpoint.StatusCancelled: "y", checkpoint.StatusDead: "z"})
	moveTo(t, s, "z", R) // a redrive
	wantLists(t, s, "z redriven", map[checkpoint.Status]string{R: "z", C: "x", checkpoint.StatusCancelled: "y"})
	for _, tc := range []struct {
		f    checkpoint.Filter
		want string
	}{
		{checkpoint.Filter{Status: C, Workflow: "claim"}, "x"},
		{checkpoint.Filter{Status: C, Workflow: "refund"}, ""},
		{checkpoint.Filter{Status: R, Workflow: "refund"}, "z"},
		{checkpoint.Filter{Workflow: "refund"}, "y z"},
		{checkpoint.Filter{}, "x y z"},
	} {
		runs, err := s.ListRuns(ctx(t), tc.f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", tc.f, err)
		}
		if got := runIDs(runs); got != tc.want {
			t.Errorf("ListRuns(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

// counts is a RunCounts without its zeros, for comparing.
type counts struct {
	Status   map[checkpoint.Status]int64
	Workflow map[string]map[checkpoint.Status]int64
}

func nonZero(c checkpoint.RunCounts) counts {
	out := counts{Status: map[checkpoint.Status]int64{}, Workflow: map[string]map[checkpoint.Status]int64{}}
	for st, n := range c.Status {
		if n != 0 {
			out.Status[st] = n
		}
	}
	for wf, m := range c.Workflow {
		for st, n := range m {
			if n == 0 {
				continue
			}
			if out.Workflow[wf] == nil {
				out.Workflow[wf] = map[checkpoint.Status]int64{}
			}
			out.Workflow[wf][st] = n
		}
	}
	return out
}

// wantCounts waits (up to 5 s) for CountRuns to say exactly want: a
// store may count a run that just left a status there for a moment (the
// KV store, until the marker of the removed index entry expires), never
// for good.
func wantCounts(t *testing.T, s checkpoint.Store, what string, want counts) {
	t.Helper()
	var got counts
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := s.CountRuns(ctx(t))
		if err != nil {
			t.Fatalf("%s: CountRuns: %v", what, err)
		}
		got = nonZero(c)
		var total int64
		for _, n := range want.Status {
			total += n
		}
		if maps.Equal(got.Status, want.Status) && sameWorkflowCounts(got.Workflow, want.Workflow) && c.Total() == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: CountRuns =\n  %v\n  %v\nwant\n  %v\n  %v", what, got.Status, got.Workflow, want.Status, want.Workflow)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sameWorkflowCounts(a, b map[string]map[checkpoint.Status]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[checkpoint.Status]int64) bool { return maps.Equal(x, y) })
}

// testCountRuns: the counters are exact after creates and status changes,
// count a run once however often it went back and forth, and do not move
// on a refused create or update.
func testCountRuns(t *testing.T, s checkpoint.Store) {
	type st = checkpoint.Status
	R, W, C, F, D := checkpoint.StatusRunning, checkpoint.StatusWaiting, checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusDead
	wantCounts(t, s, "empty store", counts{Status: map[st]int64{}, Workflow: map[string]map[st]int64{}})

	t0 := past()
	mustCreate(t, s, runAt("c1", "claim", R, t0))
	mustCreate(t, s, runAt("c2", "claim", R, t0.Add(ms(1))))
	mustCreate(t, s, runAt("c3", "claim", W, t0.Add(ms(2))))
	mustCreate(t, s, runAt("r1", "refund", R, t0.Add(ms(3))))
	mustCreate(t, s, runAt("r2", "refund", C, t0.Add(ms(4))))
	created := counts{
		Status:   map[st]int64{R: 3, W: 1, C: 1},
		Workflow: map[string]map[st]int64{"claim": {R: 2, W: 1}, "refund": {R: 1, C: 1}},
	}
	wantCounts(t, s, "created", created)

	// Back and forth, by commit and by update: counted once.
	commitTo(t, s, "c1", W)
	moveTo(t, s, "c1", R)
	moveTo(t, s, "c1", W)
	moveTo(t, s, "c1", R)
	wantCounts(t, s, "c1 back and forth", created)

	// Refused writes change nothing.
	dup := runAt("c3", "refund", C, t0)
	if _, err := s.CreateRun(ctx(t), dup); !errors.Is(err, checkpoint.ErrRunExists) {
		t.Fatalf("duplicate CreateRun(c3): %v, want ErrRunExists", err)
	}
	stale := mustGet(t, s, "r1")
	moveTo(t, s, "r1", W)
	stale.Status = F
	if _, err := s.UpdateRun(ctx(t), stale); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("stale UpdateRun(r1): %v, want ErrConflict", err)
	}
	wantCounts(t, s, "after a refused create and a refused update", counts{
		Status:   map[st]int64{R: 2, W: 2, C: 1},
		Workflow: map[string]map[st]int64{"claim": {R: 2, W: 1}, "refund": {W: 1, C: 1}},
	})

	// Ended, killed, redriven.
	commitTo(t, s, "c1", C)
	commitTo(t, s, "c2", D)
	wantCounts(t, s, "c1 completed, c2 dead", counts{
		Status:   map[st]int64{W: 2, C: 2, D: 1},
		Workflow: map[string]map[st]int64{"claim": {W: 1, C: 1, D: 1}, "refund": {W: 1, C: 1}},
	})
	moveTo(t, s, "c2", R)
	commitTo(t, s, "c2", F)
	moveTo(t, s, "r1", R)
	wantCounts(t, s, "c2 redriven and failed, r1 resumed", counts{
		Status:   map[st]int64{R: 1, W: 1, C: 2, F: 1},
		Workflow: map[string]map[st]int64{"claim": {W: 1, C: 1, F: 1}, "refund": {R: 1, C: 1}},
	})
}
