package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

func TestStickyMatchesOnlyTheFirstDeliveryOfItsMessage(t *testing.T) {
	run := checkpoint.Run{ID: "r1", Status: checkpoint.StatusRunning, Step: 2, Rev: 7}
	cp := checkpoint.Checkpoint{RunID: "r1", Step: 1, State: []byte(`{"n":1}`)}
	s := newSticky(stickyBytes)

	s.put("r1:2", run, cp)
	if _, ok := s.take("r1", "r1:2", 2); ok {
		t.Fatal("a redelivery (attempt 2) used the entry")
	}
	s.put("r1:2", run, cp)
	if _, ok := s.take("r1", "r1:3", 1); ok {
		t.Fatal("another message of the run used the entry")
	}
	if _, ok := s.take("r1", "r1:2", 1); ok {
		t.Fatal("the entry outlived a miss")
	}
	s.put("r1:2", run, cp)
	snap, ok := s.take("r1", "r1:2", 1)
	if !ok || snap.Run.Rev != 7 || snap.Previous == nil || string(snap.Previous.State) != `{"n":1}` || snap.Current != nil || snap.Journal != nil {
		t.Fatalf("first delivery: %+v, %v; want the committed run and checkpoint, nothing for the step", snap, ok)
	}
	if _, ok := s.take("r1", "r1:2", 1); ok {
		t.Fatal("the entry was used twice")
	}

	// Expired entries are not used, and are swept.
	s.put("r1:2", run, cp)
	s.mu.Lock()
	e := s.m["r1"]
	e.expires = time.Now().Add(-time.Millisecond)
	s.m["r1"] = e
	s.swept = time.Now().Add(-2 * stickyTTL)
	s.mu.Unlock()
	if _, ok := s.take("r1", "r1:2", 1); ok {
		t.Fatal("an expired entry was used")
	}
	s.put("r2:2", checkpoint.Run{ID: "r2"}, cp)
	if s.bytes <= 0 || len(s.m) != 1 {
		t.Fatalf("%d entries holding %d bytes, want the one live entry", len(s.m), s.bytes)
	}
}

func TestStickyHoldsAtMostItsBytes(t *testing.T) {
	s := newSticky(100 << 10)
	big := checkpoint.Checkpoint{State: []byte(`"` + strings.Repeat("x", 30<<10) + `"`)}
	for i := range 10 {
		id := string(rune('a' + i))
		s.put(id+":2", checkpoint.Run{ID: id}, big)
	}
	if s.bytes > 100<<10 || len(s.m) != 3 {
		t.Fatalf("%d entries holding %d bytes, want 3 within 100 KiB", len(s.m), s.bytes)
	}
	s.drop("a")
	if len(s.m) != 2 {
		t.Fatalf("%d entries after a drop, want 2", len(s.m))
	}
}
