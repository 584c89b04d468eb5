package flow_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/flow"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want flow.Rate
		err  string // a part of the error; "" for none
	}{
		{in: "10/s", want: flow.Rate{N: 10, Per: time.Second, Burst: 1}},
		{in: "600/m", want: flow.Rate{N: 600, Per: time.Minute, Burst: 1}},
		{in: "1000/h", want: flow.Rate{N: 1000, Per: time.Hour, Burst: 1}},
		{in: "5/10s", want: flow.Rate{N: 5, Per: 10 * time.Second, Burst: 1}},
		{in: "1/500ms", want: flow.Rate{N: 1, Per: 500 * time.Millisecond, Burst: 1}},
		{in: "1000000/s", want: flow.Rate{N: 1_000_000, Per: time.Second, Burst: 1}},
		{in: "10", err: `rate "10": use N/period`},
		{in: "", err: `rate "": use N/period`},
		{in: "ten/s", err: `rate "ten/s": "ten" is not a whole number`},
		{in: "1.5/s", err: `"1.5" is not a whole number`},
		{in: "10/d", err: `rate "10/d": unknown period "d"`},
		{in: "10/", err: `unknown period ""`},
		{in: "0/s", err: `rate "0/s": N 0: a rate allows at least 1 token per period`},
		{in: "-3/s", err: `N -3`},
		{in: "10/0s", err: `period 0s`},
		{in: "10/-1s", err: `period -1s`},
		{in: "1/25h", err: `period 25h0m0s: use more than 0 and at most 24h0m0s`},
		{in: "2000000/s", err: `more than one token per 1µs`},
	} {
		got, err := flow.ParseRate(tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseRate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, flow.ErrBadLimit) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseRate(%q) error %v; want ErrBadLimit with %q", tc.in, err, tc.err)
		}
	}
}

func TestRateValidate(t *testing.T) {
	for _, tc := range []struct {
		r   flow.Rate
		err string
	}{
		{r: flow.Rate{N: 10, Per: time.Second, Burst: 5}},
		{r: flow.Rate{N: 1, Per: 24 * time.Hour, Burst: 1}},
		{r: flow.Rate{N: 10, Per: time.Hour, Burst: 240}}, // refilled in exactly 24h
		{r: flow.Rate{N: 1_000_000, Per: time.Second, Burst: 1_000_000}},
		{r: flow.Rate{}, err: "N 0"},
		{r: flow.Rate{N: 10, Burst: 1}, err: "period 0s"},
		{r: flow.Rate{N: 10, Per: time.Second}, err: "burst 0: use 1 to 1000000"},
		{r: flow.Rate{N: 10, Per: time.Second, Burst: -1}, err: "burst -1"},
		{r: flow.Rate{N: 10, Per: time.Second, Burst: 1_000_001}, err: "burst 1000001"},
		{r: flow.Rate{N: 10, Per: time.Hour, Burst: 241}, err: "burst 241 at 10 per 1h0m0s: refilling it takes more than 24h0m0s"},
	} {
		err := tc.r.Validate()
		if tc.err == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.r, err)
			}
			continue
		}
		if !errors.Is(err, flow.ErrBadLimit) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v; want ErrBadLimit with %q", tc.r, err, tc.err)
		}
	}
}

func TestRateString(t *testing.T) {
	for r, want := range map[flow.Rate]string{
		{N: 10, Per: time.Second, Burst: 5}:            "10/s burst 5",
		{N: 600, Per: time.Minute, Burst: 1}:           "600/m burst 1",
		{N: 1000, Per: time.Hour, Burst: 20}:           "1000/h burst 20",
		{N: 5, Per: 10 * time.Second, Burst: 2}:        "5/10s burst 2",
		{N: 1, Per: 1500 * time.Millisecond, Burst: 1}: "1/1.5s burst 1",
	} {
		if got := r.String(); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
		// The rate part reads back.
		back, err := flow.ParseRate(strings.Fields(want)[0])
		if err != nil || back.N != r.N || back.Per != r.Per {
			t.Errorf("ParseRate(String()) of %+v: %+v, %v", r, back, err)
		}
	}
}
