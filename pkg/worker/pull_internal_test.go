package worker

import (
	"testing"
	"time"
)

func TestPrefetchFollowsStepTime(t *testing.T) {
	var c stepClock
	if n := c.prefetch(16, 16); n != 0 {
		t.Fatalf("prefetch before any step = %d, want 0 (fetch the free slots)", n)
	}
	cases := []struct {
		mean        time.Duration
		slots, want int
	}{
		{time.Millisecond, 128, 128}, // capped at the limit
		{100 * time.Millisecond, 16, 16},
		{time.Second, 16, 16},     // 16 slots start 16 steps a second
		{4 * time.Second, 16, 4},  // one slot frees every 250ms
		{30 * time.Second, 16, 0}, // a minute-long model call: no prefetch
	}
	for _, tc := range cases {
		c.mean.Store(int64(tc.mean))
		if n := c.prefetch(tc.slots, tc.slots); n != tc.want {
			t.Errorf("mean %s, %d slots: prefetch %d, want %d", tc.mean, tc.slots, n, tc.want)
		}
	}
}

func TestStepClockAverages(t *testing.T) {
	var c stepClock
	c.observe(10 * time.Millisecond)
	if got := time.Duration(c.mean.Load()); got != 10*time.Millisecond {
		t.Fatalf("first observation: mean %s, want 10ms", got)
	}
	for range 200 {
		c.observe(time.Second)
	}
	if got := time.Duration(c.mean.Load()); got < 990*time.Millisecond || got > time.Second {
		t.Fatalf("after 200 steps of 1s: mean %s, want ~1s", got)
	}
}
