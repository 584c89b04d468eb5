package faults

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
	}{
		{"", true}, {"claim-0042:7", true}, {"claim-0042:7,claim-0043:6:after-effect", true},
		{"r:1:after-checkpoint, r:2:after-publish ,r:3:hang,r:4:stop", true},
		{"claim-0042", false}, {"r:x", false}, {"r:0", false}, {"r:1:sideways", false}, {"r:1:before:extra", false},
		{":1", false}, {"r x:1", false}, {"r.1:1", false}, {"r:1,r:1:hang", false}, {"r:1,", false},
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

	in.At("claim-0042", 7, 2, Before) // redelivery: no crash
	in.At("claim-0042", 6, 1, Before) // other step
	in.At("claim-0042", 7, 1, AfterEffect)
	if kills != 0 {
		t.Fatalf("%d kills before the planned point", kills)
	}
	in.At("claim-0042", 7, 1, Before)
	in.At("claim-0043", 6, 1, AfterEffect)
	if kills != 2 {
		t.Fatalf("%d kills, want 2", kills)
	}
	in.At("agent-1", 2, 1, AfterEffect) // the call returned, not yet recorded
	if kills != 2 {
		t.Fatalf("after-record fault fired at after-effect")
	}
	in.At("agent-1", 2, 1, AfterRecord)
	if kills != 3 {
		t.Fatalf("%d kills, want 3", kills)
	}
	if !in.Hangs("claim-0044", 6, 1) || in.Hangs("claim-0044", 6, 2) || in.Hangs("claim-0042", 7, 1) {
		t.Fatal("Hangs wrong")
	}
	in.At("claim-0044", 6, 1, Hang)
	if hangs != 1 || kills != 3 {
		t.Fatalf("hangs %d kills %d", hangs, kills)
	}
	var none *Injector
	none.At("claim-0042", 7, 1, Before) // nil injects nothing
}
