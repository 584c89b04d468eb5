package cli_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

var claimSteps = []string{"receive", "verify-policy", "assess-damage", "set-amount", "approve-payout", "pay", "notify", "close", "archive"}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// missingKeys reports the keys of want missing from m.
func missingKeys(m map[string]any, want ...string) []string {
	var miss []string
	for _, k := range want {
		if _, ok := m[k]; !ok {
			miss = append(miss, k)
		}
	}
	return miss
}

// The JSON of `runs list` and `runs show` is the operator contract of
// DESIGN.md: field names exactly as written there.
func TestRunsJSONContract(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const parked, small = "claim-json", "claim-small"
		e.startParked(parked)
		// 500 is under the approval threshold: no approval, straight through.
		e.mustCLI(0, "start", "claim", "--id", small, "--input", `{"amount": 500}`)
		e.waitStatus(small, checkpoint.StatusCompleted)

		list := e.listJSON()
		if len(list) != 2 {
			t.Fatalf("runs list --json: want 2 runs, got %v", list)
		}
		byID := map[string]map[string]any{}
		for _, item := range list {
			if miss := missingKeys(item, "run_id", "workflow", "status", "step"); len(miss) > 0 {
				t.Errorf("runs list --json item lacks %v: %v", miss, item)
			}
			id, _ := item["run_id"].(string)
			byID[id] = item
		}
		if it := byID[parked]; it == nil || it["workflow"] != "claim" || it["status"] != "waiting" || it["step"] != float64(5) {
			t.Errorf("runs list --json: parked run %v", it)
		}
		if it := byID[small]; it == nil || it["workflow"] != "claim" || it["status"] != "completed" || it["step"] != float64(9) {
			t.Errorf("runs list --json: completed run %v", it)
		}
		if l := e.listJSON("--status", "waiting"); len(l) != 1 || l[0]["run_id"] != parked {
			t.Errorf("runs list --status waiting --json: %v", l)
		}
		if l := e.listJSON("--status", "completed"); len(l) != 1 || l[0]["run_id"] != small {
			t.Errorf("runs list --status completed --json: %v", l)
		}
		if l := e.listJSON("--status", "failed"); len(l) != 0 {
			t.Errorf("runs list --status failed --json: %v", l)
		}
		text := e.mustCLI(0, "runs", "list", "--status", "waiting").stdout
		if !strings.Contains(text, parked) || strings.Contains(text, small) {
			t.Errorf("runs list --status waiting:\n%s", text)
		}

		// While parked, show reports the wait.
		if v := e.showJSON(parked); v["status"] != "waiting" || v["step"] != float64(5) || v["wait"] == nil {
			t.Errorf("runs show --json of the parked run: status %v step %v wait %v", v["status"], v["step"], v["wait"])
		}

		e.mustCLI(0, "approve", parked, "--by", "ana")
		e.waitStatus(parked, checkpoint.StatusCompleted)

		v := e.showJSON(parked)
		if miss := missingKeys(v, "run_id", "workflow", "status", "step", "checkpoints", "approvals", "effects"); len(miss) > 0 {
			t.Fatalf("runs show --json lacks %v: %v", miss, v)
		}
		if v["run_id"] != parked || v["workflow"] != "claim" || v["status"] != "completed" || v["step"] != float64(9) {
			t.Errorf("runs show --json: run_id %v workflow %v status %v step %v", v["run_id"], v["workflow"], v["status"], v["step"])
		}
		cps, ok := v["checkpoints"].([]any)
		if !ok || len(cps) != 9 {
			t.Fatalf("runs show --json checkpoints: want 9, got %v", v["checkpoints"])
		}
		for i, raw := range cps {
			cp, _ := raw.(map[string]any)
			if miss := missingKeys(cp, "step", "name", "bytes", "at", "attempt"); len(miss) > 0 {
				t.Errorf("checkpoint %d lacks %v: %v", i+1, miss, cp)
				continue
			}
			if cp["step"] != float64(i+1) || cp["name"] != claimSteps[i] {
				t.Errorf("checkpoint %d: step %v name %v, want %d %s", i+1, cp["step"], cp["name"], i+1, claimSteps[i])
			}
			if b, _ := cp["bytes"].(float64); b <= 0 {
				t.Errorf("checkpoint %d: bytes %v", i+1, cp["bytes"])
			}
			if a, _ := cp["attempt"].(float64); a < 1 {
				t.Errorf("checkpoint %d: attempt %v", i+1, cp["attempt"])
			}
			if at, _ := cp["at"].(string); at == "" || strings.HasPrefix(at, "0001-") {
				t.Errorf("checkpoint %d: at %v", i+1, cp["at"])
			}
		}
		apps, ok := v["approvals"].([]any)
		if !ok || len(apps) != 1 {
			t.Fatalf("runs show --json approvals: want 1, got %v", v["approvals"])
		}
		ap, _ := apps[0].(map[string]any)
		if miss := missingKeys(ap, "by", "at", "decision", "channel", "payload_sha256"); len(miss) > 0 {
			t.Errorf("approval lacks %v: %v", miss, ap)
		}
		if ap["by"] != "ana" || ap["decision"] != "approved" || ap["channel"] != "cli" {
			t.Errorf("approval: %v", ap)
		}
		if h, _ := ap["payload_sha256"].(string); !hex64.MatchString(h) {
			t.Errorf("approval payload_sha256 %q is not 64 hex digits", ap["payload_sha256"])
		}
		effects, ok := v["effects"].([]any)
		if !ok || len(effects) != 1 {
			t.Fatalf("runs show --json effects: want 1, got %v", v["effects"])
		}
		ef, _ := effects[0].(map[string]any)
		if ef["key"] != parked+":step6" || ef["replayed"] != false {
			t.Errorf("effect: %v, want key %s:step6 replayed false", ef, parked)
		}
		if ps := e.paymentsFor(parked); len(ps) != 1 || ps[0].Key != parked+":step6" || ps[0].Amount != 1840 {
			t.Errorf("payments for %s: %+v", parked, ps)
		}

		// A run without decisions still has the arrays, empty rather than null.
		sv := e.showJSON(small)
		for _, k := range []string{"approvals", "checkpoints", "effects"} {
			if _, ok := sv[k].([]any); !ok {
				t.Errorf("runs show --json of %s: %s is %v, want an array", small, k, sv[k])
			}
		}
		if apps, _ := sv["approvals"].([]any); len(apps) != 0 {
			t.Errorf("run under the threshold has approvals: %v", apps)
		}

		// The human view names every step and the effect key.
		human := e.mustCLI(0, "runs", "show", parked).stdout
		for _, name := range claimSteps {
			if !strings.Contains(human, name) {
				t.Errorf("runs show does not mention step %s:\n%s", name, human)
			}
		}
		for _, want := range []string{parked, "completed", parked + ":step6", "approved by ana", "via cli"} {
			if !strings.Contains(human, want) {
				t.Errorf("runs show does not mention %q:\n%s", want, human)
			}
		}

		if r := e.cli("runs", "show", "no-such-run"); r.code != 3 || !strings.Contains(r.stderr, "no-such-run") {
			t.Errorf("runs show of an unknown run: want exit 3 naming it, got %s", r)
		}
		if r := e.cli("runs", "show", "no-such-run", "--json"); r.code != 3 || r.stdout != "" {
			t.Errorf("runs show --json of an unknown run: want exit 3 and nothing on stdout, got %s", r)
		}
	})
}

// `start --json` prints the run like a `runs list --json` item.
func TestStartJSON(t *testing.T) {
	e := newEnv(t, "kv")
	r := e.mustCLI(0, "start", "claim", "--id", "claim-sj", "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("start --json: %v\n%s", err, r.stdout)
	}
	if m["run_id"] != "claim-sj" || m["workflow"] != "claim" || m["step"] != float64(1) || m["status"] != "running" {
		t.Errorf("start --json: %v", m)
	}
	e.waitStatus("claim-sj", checkpoint.StatusWaiting)
}
