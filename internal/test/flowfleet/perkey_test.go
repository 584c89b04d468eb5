package flowfleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// perKey is the per-key fleet's limit per tenant, beside the limit of 5
// over all of them.
const perKey = 2

// The per-key fleet's tenants: a has many more runs than each of the
// small ones.
const bigTenant = "a"

var smallTenants = []string{"b", "c", "d"}

func allTenants() []string { return append([]string{bigTenant}, smallTenants...) }

// keyPlan is what one per-key fleet test does.
type keyPlan struct {
	big, small int // runs of tenant a, and of each of b, c and d
	turns      int
	// kill: once a fifth of the calls are made, SIGKILL the worker with
	// the most of a's calls in flight.
	kill bool
	// retention: once every run is done, wait for every key's record to
	// go.
	retention bool
	// starved bounds when the last of b, c and d's runs finished, as a
	// share of the time a's last run took (both since the calls began).
	starved float64
}

// TestFlowPerKey is the fleet acceptance of concurrency limits per key
// (flow.Store.SetConcurrencyPerKey) at process level, on each store
// (DURABLE_FLOWFLEET=1, `make flowfleet`; about a minute): the three worker
// processes of TestFlowFleet share a limit on "model" of 5 over all keys
// and 2 per key, the tenant (the workflow's FairnessKey). Tenant a starts
// 60 runs of 6 turns, then b, c and d 10 each, while the provider holds
// its calls, so that every tenant's steps are queued when it answers;
// calls take 100-200 ms.
//
//   - While the calls are held, each tenant has its record
//     k.model.<hash> in the bucket durable_limits.
//   - The provider never has more than 2 calls of a tenant in flight,
//     nor more than 5 in all; a reaches 2, all together 4 or 5.
//   - Every run completes; each turn reached the provider once, or more
//     only when the killed worker made the calls before the last.
//   - b, c and d are not starved behind a's backlog: the last of their
//     runs finishes within 0.75 of the time a's last run takes. At fair
//     shares it is about a quarter (a is held to 2 calls at once, the
//     others share 3), but the kill may stall a small tenant for a
//     lease: the killed worker's lease holds the tenant's slots, and a
//     want in it makes the live workers keep only their share of the
//     others' (measured 0.24-0.52).
//   - Once a fifth of the calls are made, the worker with the most of
//     a's calls in flight is SIGKILLed. The live workers have 2 of a's
//     calls in flight again only once the killed worker's lease in a's
//     record has run out, and within the 15 s lease (+3 s) of the kill.
//   - Once every run is done, every k.model.* record is gone within a
//     lease and a third (+5 s) of the last run's end: an idle key's
//     record is purged once its slots were unused for a lease (looked at
//     every third of one), a dead holder's by another worker a random
//     third of a lease after its lease ran out.
func TestFlowPerKey(t *testing.T) {
	if os.Getenv("DURABLE_FLOWFLEET") == "" {
		t.Skip("about a minute: run with DURABLE_FLOWFLEET=1 go test -run TestFlowPerKey ./internal/test/flowfleet (make flowfleet)")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runPerKey(t, kind, keyPlan{big: 60, small: 10, turns: 6, kill: true, retention: true, starved: 0.75})
		})
	}
}

// TestFlowPerKeyShort is TestFlowPerKey's short form for `go test
// ./...` (about 7 s once the worker is built): runs of one turn, no kill, and no wait for the
// records to go (that takes the workers' lease, 15 s); b, c and d's
// last runs finish within half of a's time (measured 0.20-0.33).
func TestFlowPerKeyShort(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runPerKey(t, kind, keyPlan{big: 60, small: 10, turns: 1, starved: 0.5})
		})
	}
}

func runPerKey(t *testing.T, kind string, p keyPlan) {
	began := time.Now()
	d := deploy(t, kind, limits{all: limit, perKey: perKey}, nWorkers, concurrency, func() time.Duration {
		return 100*time.Millisecond + rand.N(100*time.Millisecond)
	})
	open := d.prov.hold()
	t.Cleanup(open)
	ids := d.startMany(bigTenant, p.big, p.turns)
	for _, tenant := range smallTenants {
		ids = append(ids, d.startMany(tenant, p.small, p.turns)...)
	}
	d.waitKeyRecords(allTenants())
	t.Logf("%s: deployed, %d runs started and queued in %s", kind, len(ids), time.Since(began).Round(100*time.Millisecond))
	opened := time.Now()
	open()
	dead := 0
	if p.kill {
		dead = d.killHolderOf(bigTenant, len(ids)*p.turns/5)
	}
	runs := d.waitCompleted(ids, 3*time.Minute)
	dup := d.checkCalls(ids, p.turns, dead)
	pk := d.checkKeyPeaks()
	last := lastFinish(runs)
	d.checkStarved(last, opened, p.starved)
	ended := slices.MaxFunc(slices.Collect(maps.Values(last)), time.Time.Compare)
	var gone time.Duration
	if p.retention {
		gone = d.waitKeyRecordsGone(ended)
	}
	d.checkLogs()
	total, peak := d.prov.stats()
	t.Logf("%s: %d runs x %d turns: %d calls (%d turns called more than once), peak %d in flight (limit %d), per tenant %s (limit %d); last run done %s after the calls began, %s in all",
		kind, len(ids), p.turns, total, dup, peak, limit, peaksString(pk, p.kill), perKey, ended.Sub(opened).Round(10*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	t.Logf("%s: last run done per tenant, after the calls began: %s", kind, finishString(last, opened))
	if p.retention {
		t.Logf("%s: every k.model.* record gone %s after the last run was done (lease %s)", kind, gone.Round(10*time.Millisecond), lease)
	}
}

// checkKeyPeaks: the provider never had more than perKey calls of a
// tenant in flight, nor more than limit in all; the big tenant's limit
// bound (it reached perKey), and so did the limit over all (4 or 5).
func (d *deployment) checkKeyPeaks() map[string]peaks {
	d.t.Helper()
	pk := d.prov.tenantPeaks()
	for tenant, p := range pk {
		if p.All > perKey {
			d.t.Errorf("%s: tenant %s had %d calls in flight at once; want at most %d (its limit)", d.kind, tenant, p.All, perKey)
		}
	}
	if n := pk[bigTenant].All; n != perKey {
		d.t.Errorf("%s: tenant %s had at most %d calls in flight; want %d (its limit binds)", d.kind, bigTenant, n, perKey)
	}
	if _, peak := d.prov.stats(); peak > limit || peak < limit-1 {
		d.t.Errorf("%s: the provider had at most %d calls in flight; want %d (the limit)", d.kind, peak, limit)
	}
	return pk
}

// lastFinish is when each tenant's last run finished (completed in the
// store: its UpdatedAt), by tenant; a run's id is "<tenant>-NNNN".
func lastFinish(runs map[string]checkpoint.Run) map[string]time.Time {
	out := map[string]time.Time{}
	for id, r := range runs {
		tenant, _, _ := strings.Cut(id, "-")
		if r.UpdatedAt.After(out[tenant]) {
			out[tenant] = r.UpdatedAt
		}
	}
	return out
}

// checkStarved: the small tenants' last run finished within share of the
// time the big tenant's last run took, both since opened.
func (d *deployment) checkStarved(last map[string]time.Time, opened time.Time, share float64) {
	d.t.Helper()
	big := last[bigTenant].Sub(opened)
	for _, tenant := range smallTenants {
		if took := last[tenant].Sub(opened); took > time.Duration(share*float64(big)) {
			d.t.Errorf("%s: tenant %s's last run finished %s after the calls began, %.2f of the %s %s's took; want within %.2f",
				d.kind, tenant, took.Round(10*time.Millisecond), took.Seconds()/big.Seconds(), big.Round(10*time.Millisecond), bigTenant, share)
		}
	}
}

// peaksString says each tenant's peak of calls in flight, and since the
// kill when there was one.
func peaksString(pk map[string]peaks, killed bool) string {
	var b strings.Builder
	for _, tenant := range slices.Sorted(maps.Keys(pk)) {
		fmt.Fprintf(&b, " %s %d", tenant, pk[tenant].All)
		if killed {
			fmt.Fprintf(&b, " (%d since the kill)", pk[tenant].SinceKill)
		}
	}
	return strings.TrimSpace(b.String())
}

// finishString says when each tenant's last run finished since opened,
// and that as a share of the big tenant's.
func finishString(last map[string]time.Time, opened time.Time) string {
	big := last[bigTenant].Sub(opened)
	var b strings.Builder
	for _, tenant := range slices.Sorted(maps.Keys(last)) {
		took := last[tenant].Sub(opened)
		fmt.Fprintf(&b, " %s %s (%.2f)", tenant, took.Round(10*time.Millisecond), took.Seconds()/big.Seconds())
	}
	return strings.TrimSpace(b.String())
}

// killHolderOf SIGKILLs, once after calls were made (and every worker
// called), the worker with the most of tenant's calls in flight, and
// waits until the live workers have perKey of tenant's calls in flight
// again: not before the killed worker's lease in tenant's record ran
// out (until then it holds slots of tenant), and within a lease (+3 s)
// of the kill. It returns the killed worker's pid.
func (d *deployment) killHolderOf(tenant string, after int) int {
	d.t.Helper()
	var pid, inflight int
	testenv.Eventually(d.t, time.Minute, fmt.Sprintf("%d calls, then a worker with a call of %s in flight", after, tenant), func() bool {
		total, _ := d.prov.stats()
		pid, inflight = d.prov.busiestFor(tenant)
		return total >= after && inflight > 0 && len(d.prov.callers()) == nWorkers
	})
	i := slices.IndexFunc(d.workers, func(w *proc.Proc) bool { return w.Pid() == pid })
	calls, _ := d.prov.stats()
	before := d.leases()
	d.prov.killing(pid)
	killed := time.Now()
	if err := d.workers[i].Kill(); err != nil {
		d.t.Fatal(err)
	}
	// Each holder's last lease in each key's record: the killed worker's
	// is its final one, read before another worker prunes it (once it
	// ran out).
	last := map[string]map[string]holderLease{}
	id, _ := d.deadHolder(before, func() bool {
		for _, key := range allTenants() {
			if rec, ok := d.keyRecord(key); ok {
				if last[key] == nil {
					last[key] = map[string]holderLease{}
				}
				maps.Copy(last[key], rec.Holders)
			}
		}
		return !d.prov.tenantPeaks()[tenant].FullAgain.IsZero()
	})
	held := map[string]holderLease{} // what the killed worker's leases held of each key, at their end
	for key, hs := range last {
		if l, ok := hs[id]; ok {
			held[key] = l
		}
	}
	dead := held[tenant]
	full := d.prov.tenantPeaks()[tenant].FullAgain
	back, leaseEnd := full.Sub(killed), dead.Until.Sub(killed)
	if dead.N > 0 && full.Before(dead.Until) {
		d.t.Errorf("%s: the live workers had %d of %s's calls in flight %s after the kill, before the killed worker's lease of %d of its slots ran out (%s after the kill)",
			d.kind, perKey, tenant, back, dead.N, leaseEnd)
	}
	if back > lease+3*time.Second {
		d.t.Errorf("%s: %s's slots back %s after the kill; want within the %s lease (+3 s)", d.kind, tenant, back, lease)
	}
	d.t.Logf("%s: killed %s after %d calls (pid %d, %d of %s's calls in flight); its leases held of the keys %s: %s had %d calls in flight from the live workers again %s after the kill (the killed lease of it ran out after %s)",
		d.kind, d.workers[i].Name(), calls, pid, inflight, tenant, heldString(held), tenant, perKey, back.Round(10*time.Millisecond), leaseEnd.Round(10*time.Millisecond))
	return pid
}

// heldString says what a worker's leases held of each key.
func heldString(held map[string]holderLease) string {
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(held)) {
		parts = append(parts, fmt.Sprintf("%s %d (wanting %d)", key, held[key].N, held[key].Want))
	}
	return strings.Join(parts, ", ")
}

// keyRecord is a key's record of the per-key limit of "model" as stored
// (KV durable_limits, key k.model.<hash>, as `nats kv get` shows it).
type keyRecord struct {
	Key     string                 `json:"key"`
	Holders map[string]holderLease `json:"holders"`
}

// keyKV is the KV key of key's record of "model": k.model. and the first
// 16 bytes of key's SHA-256 in hex, as docs/design-flow-control.md says.
func keyKV(key string) string {
	h := sha256.Sum256([]byte(key))
	return "k.model." + hex.EncodeToString(h[:16])
}

// keyRecords reads every record k.model.* stored now, by KV key.
func (d *deployment) keyRecords() map[string]keyRecord {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := d.js.KeyValue(ctx, "durable_limits")
	if err != nil {
		d.t.Fatal(err)
	}
	w, err := kv.WatchFiltered(ctx, []string{"k.model.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		d.t.Fatal(err)
	}
	defer w.Stop()
	out := map[string]keyRecord{}
	for {
		select {
		case e := <-w.Updates():
			if e == nil { // every record stored was handed
				return out
			}
			var rec keyRecord
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				d.t.Fatalf("%s: %s: %v", d.kind, e.Key(), err)
			}
			out[e.Key()] = rec
		case <-ctx.Done():
			d.t.Fatalf("%s: read the records k.model.*: %v", d.kind, ctx.Err())
		}
	}
}

// keyRecord reads key's record; false when none is stored.
func (d *deployment) keyRecord(key string) (keyRecord, bool) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := d.js.KeyValue(ctx, "durable_limits")
	if err != nil {
		d.t.Fatal(err)
	}
	e, err := kv.Get(ctx, keyKV(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return keyRecord{}, false
	}
	if err != nil {
		d.t.Fatal(err)
	}
	var rec keyRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		d.t.Fatalf("%s: %s: %v", d.kind, e.Key(), err)
	}
	return rec, true
}

// waitKeyRecords waits until each tenant has its record, under the KV
// key keyKV says, with a lease in it.
func (d *deployment) waitKeyRecords(tenants []string) {
	d.t.Helper()
	testenv.Eventually(d.t, 30*time.Second, fmt.Sprintf("a record k.model.* with a lease for each of %v", tenants), func() bool {
		recs := d.keyRecords()
		for _, tenant := range tenants {
			rec, ok := recs[keyKV(tenant)]
			if !ok || rec.Key != tenant || len(rec.Holders) == 0 {
				return false
			}
		}
		return true
	})
}

// waitKeyRecordsGone waits until no record k.model.* is stored and
// returns how long after ended that was; it fails the test if any is
// left a lease and a third (+5 s) after ended.
func (d *deployment) waitKeyRecordsGone(ended time.Time) time.Duration {
	d.t.Helper()
	deadline := ended.Add(lease + lease/3 + 5*time.Second)
	for {
		recs := d.keyRecords()
		if len(recs) == 0 {
			return time.Since(ended)
		}
		if time.Now().After(deadline) {
			for kv, rec := range recs {
				d.t.Errorf("%s: %s (key %q) still stored %s after the last run was done: holders %v", d.kind, kv, rec.Key, time.Since(ended).Round(10*time.Millisecond), rec.Holders)
			}
			return time.Since(ended)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
