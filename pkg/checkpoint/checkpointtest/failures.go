package checkpointtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/durable-run/durable/pkg/checkpoint"
)

func failure(attempt int, msg string) checkpoint.Failure {
	return checkpoint.Failure{Attempt: attempt, Error: msg, At: base.Add(time.Duration(attempt) * time.Second)}
}

func mustRecordFailure(t *testing.T, s checkpoint.Store, id string, n int, f checkpoint.Failure) int {
	t.Helper()
	count, err := s.RecordFailure(ctx(t), id, checkpoint.AtStep(n), f)
	if err != nil {
		t.Fatalf("RecordFailure(%s, %d, attempt %d): %v", id, n, f.Attempt, err)
	}
	return count
}

func failures(t *testing.T, s checkpoint.Store, id string, n int) []checkpoint.Failure {
	t.Helper()
	snap, err := s.Load(ctx(t), id, checkpoint.AtStep(n))
	if err != nil {
		t.Fatalf("Load(%s, %d): %v", id, n, err)
	}
	return snap.Failures
}

// The count is what the worker compares with the step's retry policy: it
// must go up by one per failure, per step.
func testRecordFailureCounts(t *testing.T, s checkpoint.Store) {
	mustCreate(t, s, newRun("fail-1"))
	var want []checkpoint.Failure
	for i := 1; i <= 3; i++ {
		f := failure(i, fmt.Sprintf("attempt %d: provider said %q", i, "no"))
		want = append(want, f)
		if got := mustRecordFailure(t, s, "fail-1", 2, f); got != i {
			t.Fatalf("failure %d of step 2: RecordFailure returned %d", i, got)
		}
	}
	sameJSON(t, "Load(2).Failures", failures(t, s, "fail-1", 2), want)

	// Each step counts its own failures.
	next := failure(1, "step 3 failed")
	if got := mustRecordFailure(t, s, "fail-1", 3, next); got != 1 {
		t.Fatalf("first failure of step 3: RecordFailure returned %d, want 1", got)
	}
	sameJSON(t, "Load(3).Failures", failures(t, s, "fail-1", 3), []checkpoint.Failure{next})
	sameJSON(t, "Load(2).Failures after step 3 failed", failures(t, s, "fail-1", 2), want)
	if got := failures(t, s, "fail-1", 1); len(got) != 0 {
		t.Fatalf("Load(1).Failures = %+v, want none", got)
	}
	if got := mustRecordFailure(t, s, "fail-1", 2, failure(4, "again")); got != 4 {
		t.Fatalf("fourth failure of step 2: RecordFailure returned %d, want 4", got)
	}

	// A failure without a time is stamped by the store.
	before := time.Now()
	mustRecordFailure(t, s, "fail-1", 4, checkpoint.Failure{Attempt: 1, Error: "no time"})
	got := failures(t, s, "fail-1", 4)
	if len(got) != 1 || got[0].At.Before(before.Add(-time.Second)) || got[0].At.After(time.Now().Add(time.Second)) {
		t.Fatalf("Load(4).Failures = %+v, want one failure stamped about %v", got, before)
	}
}

// Several deliveries of one step failing at once must each count: a lost
// update would give a step more attempts than its policy allows.
func testRecordFailureConcurrent(t *testing.T, s checkpoint.Store) {
	const writers = 20
	mustCreate(t, s, newRun("fail-race"))
	counts := make([]int, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			counts[i], errs[i] = s.RecordFailure(ctx(t), "fail-race", checkpoint.AtStep(1), failure(i+1, fmt.Sprintf("writer %d", i)))
		}()
	}
	close(start)
	wg.Wait()
	seen := make(map[int]int)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
		seen[counts[i]]++
	}
	for c := 1; c <= writers; c++ {
		if seen[c] != 1 {
			t.Fatalf("count %d returned %d times, want once; all counts: %v", c, seen[c], counts)
		}
	}
	stored := failures(t, s, "fail-race", 1)
	if len(stored) != writers {
		t.Fatalf("Load.Failures has %d records, want %d", len(stored), writers)
	}
	attempts := make(map[int]bool)
	for _, f := range stored {
		attempts[f.Attempt] = true
	}
	if len(attempts) != writers {
		t.Fatalf("Load.Failures lost records: %+v", stored)
	}
	if got := mustRecordFailure(t, s, "fail-race", 1, failure(writers+1, "after")); got != writers+1 {
		t.Fatalf("RecordFailure after %d concurrent ones returned %d, want %d", writers, got, writers+1)
	}
}

// Errors can be whole stack traces or provider responses; the store keeps
// the first MaxFailureError bytes, cut on a character boundary.
func testRecordFailureTruncates(t *testing.T, s checkpoint.Store) {
	mustCreate(t, s, newRun("fail-long"))
	ascii := strings.Repeat("0123456789abcdef", 5000/16)
	mustRecordFailure(t, s, "fail-long", 1, failure(1, ascii))
	euro := strings.Repeat("€", 1000) // 3 bytes each: 1024 falls inside one
	mustRecordFailure(t, s, "fail-long", 1, failure(2, euro))

	got := failures(t, s, "fail-long", 1)
	if len(got) != 2 {
		t.Fatalf("Load.Failures has %d records, want 2", len(got))
	}
	if got[0].Error != ascii[:checkpoint.MaxFailureError] {
		t.Fatalf("stored error is %d bytes %q..., want the first %d bytes",
			len(got[0].Error), got[0].Error[:min(32, len(got[0].Error))], checkpoint.MaxFailureError)
	}
	e := got[1].Error
	if len(e) > checkpoint.MaxFailureError || len(e) < checkpoint.MaxFailureError-3 ||
		!utf8.ValidString(e) || !strings.HasPrefix(euro, e) {
		t.Fatalf("stored multibyte error is %d bytes (valid UTF-8 %v), want a prefix of the original of %d-%d bytes",
			len(e), utf8.ValidString(e), checkpoint.MaxFailureError-3, checkpoint.MaxFailureError)
	}
	if got[0].Attempt != 1 || got[1].Attempt != 2 || !got[1].At.Equal(base.Add(2*time.Second)) {
		t.Fatalf("truncation changed other fields: %+v", got)
	}
}

// A step that keeps failing keeps its exact count while only the last
// MaxFailureRecords records are kept.
func testRecordFailureKeepsLast(t *testing.T, s checkpoint.Store) {
	const total = checkpoint.MaxFailureRecords + 10
	mustCreate(t, s, newRun("fail-many"))
	for i := 1; i <= total; i++ {
		if got := mustRecordFailure(t, s, "fail-many", 1, failure(i, fmt.Sprint("failure ", i))); got != i {
			t.Fatalf("failure %d: RecordFailure returned %d", i, got)
		}
	}
	got := failures(t, s, "fail-many", 1)
	if len(got) != checkpoint.MaxFailureRecords {
		t.Fatalf("Load.Failures has %d records after %d failures, want %d", len(got), total, checkpoint.MaxFailureRecords)
	}
	for i, f := range got {
		want := failure(total-checkpoint.MaxFailureRecords+1+i, "")
		want.Error = fmt.Sprint("failure ", want.Attempt)
		sameJSON(t, fmt.Sprintf("Load.Failures[%d]", i), f, want)
	}
}

func testRecordFailureUnknownRun(t *testing.T, s checkpoint.Store) {
	_, err := s.RecordFailure(ctx(t), "ghost-fail", checkpoint.AtStep(1), failure(1, "boom"))
	wantErr(t, "RecordFailure on an unknown run", err, checkpoint.ErrNotFound)
	_, err = s.RecordFailure(ctx(t), "bad.id", checkpoint.AtStep(1), failure(1, "boom"))
	wantErr(t, "RecordFailure on an invalid run id", err, checkpoint.ErrNotFound)
	_, err = s.GetRun(ctx(t), "ghost-fail")
	wantErr(t, "GetRun after RecordFailure on an unknown run", err, checkpoint.ErrNotFound)

	// Creating the run afterwards starts from a clean count.
	mustCreate(t, s, newRun("ghost-fail"))
	if got := mustRecordFailure(t, s, "ghost-fail", 1, failure(1, "boom")); got != 1 {
		t.Fatalf("first failure after the run was created: RecordFailure returned %d, want 1", got)
	}
}
