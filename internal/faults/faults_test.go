package faults

import (
	"context"
	"testing"

	"github.com/durable-run/durable/pkg/worker"
)

// at calls the injector as the worker does at the boundary of point.
func at(in *Injector, run string, step, delivery int, point string) {
	in.At(context.Background(), boundaries[point], worker.Delivery{RunID: run, Step: step, Attempt: delivery})
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
	}{
		{"", true}, {"claim-0042:7", true}, {"claim-0042:7,claim-0043:6:after-effect", true},
		{"r:1:after-checkpoint, r:2:after-publish ,r:3:hang,r:4:stop", true},
		{"claim-0042", false}, {"r:x", false}, {"r:0", false}, {"r:1:sideways", false}, {"r:1:before:extra", false},
		{":1", false}, {"r x:1", false}, {"r.1:1", false}, {"r:1,r:1:hang", false}, {"r:1,", false},
		{"fanout-1:2.5:after-effect", true}, {"r:2.5,r:2.6,r:2", true}, {"r:2.0", false}, {"r:2.x", false}, {"r:.5", false}, {"r:2.5,r:2.5:hang", false},
	} {
		_, err := Parse(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("Parse(%q) = %v, want ok=%t", tc.spec, err, tc.ok)
		}
	}
}

func TestAtFiresOnFirstDeliveryOnly(t *testing.T) {
	in, err := Parse("claim-0042:7,claim-0043:6:after-effect,claim-0044:6:hang,agent-1:2:after-record")
	if err != nil {
		t.Fatal(err)
	}
	kills, hangs := 0, 0
	in.Kill = func() { kills++ }
	in.OnHang = func() { hangs++ }

	at(in, "claim-0042", 7, 2, Before) // redelivery: no crash
	at(in, "claim-0042", 6, 1, Before) // other step
	at(in, "claim-0042", 7, 1, AfterEffect)
	if kills != 0 {
		t.Fatalf("%d kills before the planned point", kills)
	}
	at(in, "claim-0042", 7, 1, Before)
	at(in, "claim-0043", 6, 1, AfterEffect)
	if kills != 2 {
		t.Fatalf("%d kills, want 2", kills)
	}
	at(in, "agent-1", 2, 1, AfterEffect) // the call returned, not yet recorded
	if kills != 2 {
		t.Fatalf("after-record fault fired at after-effect")
	}
	at(in, "agent-1", 2, 1, AfterRecord)
	if kills != 3 {
		t.Fatalf("%d kills, want 3", kills)
	}
	at(in, "claim-0044", 6, 1, Before) // a hang fires on receipt, before the step
	if hangs != 0 {
		t.Fatal("hang fault fired before the step, not on receipt")
	}
	at(in, "claim-0044", 6, 1, Hang)
	if hangs != 1 || kills != 3 {
		t.Fatalf("hangs %d kills %d", hangs, kills)
	}
	branch, err := Parse("fan-1:2.5:after-checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	branch.Kill = func() { kills++ }
	branch.At(context.Background(), worker.AfterCheckpoint, worker.Delivery{RunID: "fan-1", Step: 2, Attempt: 1}) // the join, not the branch
	branch.At(context.Background(), worker.AfterCheckpoint, worker.Delivery{RunID: "fan-1", Step: 2, Branch: 4, Attempt: 1})
	if kills != 3 {
		t.Fatal("a branch fault fired at the join or another branch")
	}
	branch.At(context.Background(), worker.AfterCheckpoint, worker.Delivery{RunID: "fan-1", Step: 2, Branch: 5, Attempt: 1})
	if kills != 4 {
		t.Fatalf("%d kills, want 4: the branch fault did not fire", kills)
	}
	var none *Injector
	at(none, "claim-0042", 7, 1, Before) // nil injects nothing
}
