package cli_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/durable-run/durable/internal/cli"
)

// Bad bench flags are refused before any server starts, with exit code 2
// and a message naming the flag.
func TestBenchRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--parked", "-1"}, "--parked -1"},
		{[]string{"--only", "throughput"}, `--only "throughput"`},
		{[]string{"--only", "parked", "--parked", "0"}, "nothing to run"},
		{[]string{"--only", "parked", "--store", "kv"}, "Redis store"},
		{[]string{"--sweep-schedulers", "0"}, "--sweep-schedulers 0"},
		{[]string{"--durability", "paranoid"}, `--durability "paranoid"`},
		{[]string{"--history", "-5"}, "--history -5"},
		{[]string{"--history", "1000", "--only", "fanout"}, "drop --only fanout"},
	} {
		var out, errb bytes.Buffer
		code := cli.Main(append([]string{"bench"}, c.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
		if out.Len() > 0 {
			t.Errorf("bench %v printed %q", c.args, out.String())
		}
	}
}
