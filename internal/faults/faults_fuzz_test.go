package faults

import (
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/queue"
)

// FuzzParse: no DURABLE_CRASH value panics a worker at start, and one it
// accepts plans only faults that can fire: each at a real run id, a step
// of 1 or more and a known point, one per run:step.
func FuzzParse(f *testing.F) {
	f.Add("claim-0042:7,claim-0043:6:after-effect,claim-0044:6:hang")
	f.Add(" r:1:after-checkpoint, r:2:after-publish ,r:3:stop ")
	f.Add("r:1:before")
	f.Add("r:+1")
	f.Add("r:0")
	f.Add("r:99999999999999999999")
	f.Add("r:1:sideways")
	f.Add("r:1:before:extra")
	f.Add("r:1,r:1:hang")
	f.Add("r x:1")
	f.Add(":1")
	f.Add("r:1,,")
	f.Add("\u00a0")
	f.Fuzz(func(t *testing.T, spec string) {
		in, err := Parse(spec)
		if err != nil {
			if in != nil {
				t.Fatalf("error %v with an injector", err)
			}
			return
		}
		if in == nil {
			if strings.TrimSpace(spec) != "" {
				t.Fatalf("spec %q planned nothing without an error", spec)
			}
			return
		}
		if len(in.points) == 0 || len(in.points) > strings.Count(spec, ",")+1 {
			t.Fatalf("spec %q planned %d faults", spec, len(in.points))
		}
		for k, point := range in.points {
			if queue.ValidateRunID(k.run) != nil || k.step < 1 {
				t.Fatalf("spec %q planned a fault at %q step %d", spec, k.run, k.step)
			}
			switch point {
			case Before, AfterEffect, AfterRecord, AfterCheckpoint, AfterPublish, Hang, Stop:
			default:
				t.Fatalf("spec %q planned point %q", spec, point)
			}
			if boundaries[point] == "" {
				t.Fatalf("spec %q: point %s fires at no worker boundary", spec, point)
			}
		}
	})
}
