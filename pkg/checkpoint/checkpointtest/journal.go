package checkpointtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

func call(name, result string, at time.Duration) checkpoint.CallRecord {
	return checkpoint.CallRecord{
		Name: name, ArgsSHA256: "sha-" + name, Result: json.RawMessage(result), At: base.Add(at),
	}
}

func journal(t *testing.T, s checkpoint.Store, id string, n int) []checkpoint.CallRecord {
	t.Helper()
	snap, err := s.Load(ctx(t), id, checkpoint.AtStep(n))
	if err != nil {
		t.Fatalf("Load(%s, %d): %v", id, n, err)
	}
	return snap.Journal
}

// byName orders records so a test does not depend on the journal's order
// beyond what the interface promises.
func byName(recs []checkpoint.CallRecord) []checkpoint.CallRecord {
	out := append([]checkpoint.CallRecord(nil), recs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func testRecordCallFirstWriterWins(t *testing.T, s checkpoint.Store) {
	mustCreate(t, s, newRun("journal-1"))
	first := call("model", `{"text":"first"}`, 0)
	got, err := s.RecordCall(ctx(t), "journal-1", checkpoint.AtStep(1), first)
	if err != nil {
		t.Fatalf("RecordCall: %v", err)
	}
	sameJSON(t, "first RecordCall", got, first)

	second := call("model", `{"text":"second"}`, time.Second)
	second.Error = "should not be stored"
	got, err = s.RecordCall(ctx(t), "journal-1", checkpoint.AtStep(1), second)
	if err != nil {
		t.Fatalf("second RecordCall: %v", err)
	}
	sameJSON(t, "second RecordCall returns the first record", got, first)

	// Other names in the same step are separate records.
	tool := call("tool.lookup", `[1,2,3]`, 2*time.Second)
	failed := call("pay_v2-x", ``, 3*time.Second)
	failed.Error = "provider said no"
	for _, rec := range []checkpoint.CallRecord{tool, failed} {
		if got, err := s.RecordCall(ctx(t), "journal-1", checkpoint.AtStep(1), rec); err != nil {
			t.Fatalf("RecordCall(%s): %v", rec.Name, err)
		} else {
			sameJSON(t, "RecordCall("+rec.Name+")", got, rec)
		}
	}
	sameJSON(t, "journal of step 1", byName(journal(t, s, "journal-1", 1)),
		[]checkpoint.CallRecord{first, failed, tool})

	// The same name in the next step is a new call.
	next := call("model", `{"text":"step two"}`, 4*time.Second)
	got, err = s.RecordCall(ctx(t), "journal-1", checkpoint.AtStep(2), next)
	if err != nil {
		t.Fatalf("RecordCall step 2: %v", err)
	}
	sameJSON(t, "RecordCall in step 2", got, next)
	sameJSON(t, "journal of step 2", journal(t, s, "journal-1", 2), []checkpoint.CallRecord{next})
	if n := len(journal(t, s, "journal-1", 1)); n != 3 {
		t.Fatalf("journal of step 1 has %d records after step 2 recorded, want 3", n)
	}
	if n := len(journal(t, s, "journal-1", 3)); n != 0 {
		t.Fatalf("journal of step 3 has %d records, want 0", n)
	}
}

// Two deliveries of one step racing on the same call must agree on one
// result, or the step would go on with two different model answers.
func testRecordCallConcurrentSameName(t *testing.T, s checkpoint.Store) {
	const writers = 16
	mustCreate(t, s, newRun("journal-race"))
	got := make([]checkpoint.CallRecord, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = s.RecordCall(ctx(t), "journal-race", checkpoint.AtStep(3),
				call("model", fmt.Sprintf(`{"writer":%d}`, i), time.Duration(i)*time.Millisecond))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	winner := canon(t, got[0])
	for i := range got {
		if c := canon(t, got[i]); c != winner {
			t.Fatalf("writer %d got %s, writer 0 got %s", i, c, winner)
		}
	}
	stored := journal(t, s, "journal-race", 3)
	if len(stored) != 1 {
		t.Fatalf("journal has %d records, want 1: %+v", len(stored), stored)
	}
	sameJSON(t, "stored record", stored[0], got[0])
}

// Different calls of one step recorded at once must all be kept (a store
// holding the journal in one document must not lose concurrent updates).
func testRecordCallConcurrentNames(t *testing.T, s checkpoint.Store) {
	const writers = 12
	mustCreate(t, s, newRun("journal-names"))
	var wg sync.WaitGroup
	errs := make([]error, writers)
	var want []checkpoint.CallRecord
	for i := range writers {
		rec := call(fmt.Sprintf("call-%02d", i), fmt.Sprintf(`%d`, i), time.Duration(i)*time.Second)
		want = append(want, rec)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got checkpoint.CallRecord
			got, errs[i] = s.RecordCall(ctx(t), "journal-names", checkpoint.AtStep(1), rec)
			if errs[i] == nil && got.Name != rec.Name {
				errs[i] = fmt.Errorf("RecordCall(%s) returned %s", rec.Name, got.Name)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	sameJSON(t, "journal", byName(journal(t, s, "journal-names", 1)), want)
}
