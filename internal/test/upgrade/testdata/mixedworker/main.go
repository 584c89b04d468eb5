// Command mixedworker is a worker of package upgrade's MixedWorkflows
// with every flag of `durable worker` (pkg/workercmd, which both releases
// share). TestMixedFleet builds it twice, from the checkout and from the
// tree of the previous release with ../../workflows.go and ../../mixed.go
// copied in, and runs one process of each in a fleet. It lives in
// testdata so that `go build ./...` leaves it alone.
//
// Its environment: MIXED_DIR, where it appends to its ledger,
// <pid>.ledger, a line per step entered ("enter <run>:<step>") and per
// payment ("pay <key>"), each written before the step goes on, so a
// SIGKILL loses none; and where a file refuse-<run> makes mx-flaky's
// step fail. MIXED_WAKE (RFC 3339) is when up-sleep's nap ends.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durable-run/durable/internal/test/upgrade"
	"github.com/durable-run/durable/pkg/workercmd"
)

func main() {
	dir := os.Getenv("MIXED_DIR")
	wake, err := time.Parse(time.RFC3339Nano, os.Getenv("MIXED_WAKE"))
	if dir == "" || err != nil {
		fail(fmt.Errorf("want MIXED_DIR and MIXED_WAKE (RFC 3339): %v", err))
	}
	file, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(os.Getpid())+".ledger"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fail(err)
	}
	ledger := &upgrade.Ledger{Record: func(what, key string) {
		// One write per line, unbuffered: the kernel has it when the
		// step goes on.
		if _, err := file.WriteString(what + " " + key + "\n"); err != nil {
			fail(err)
		}
	}}
	refused := func(run string) bool {
		_, err := os.Stat(filepath.Join(dir, "refuse-"+run))
		return err == nil
	}
	workercmd.Main(workercmd.Config{Name: "mixedworker", Registry: upgrade.MixedWorkflows(ledger, wake, refused)})
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mixedworker:", err)
	os.Exit(1)
}
