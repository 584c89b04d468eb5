package checkpoint_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Size must never undercount the document the stores write (the budget
// would let a larger one through) and should overcount by little.
func TestSizeBoundsTheEncoding(t *testing.T) {
	at := time.Date(2026, 11, 29, 23, 0, 0, 123456789, time.UTC)
	big := json.RawMessage(`{"doc":"` + strings.Repeat("x", 100_000) + `"}`)
	cases := map[string]checkpoint.Checkpoint{
		"empty":   {},
		"minimal": {RunID: "r", Step: 1, Name: "a", State: json.RawMessage(`{}`), Status: checkpoint.StatusRunning, At: at},
		"typical": {RunID: "claim-0042", Step: 6, Name: "pay", State: json.RawMessage(`{"run_id":"claim-0042","amount":1840,"note":"` + strings.Repeat("n", 120) + `"}`),
			Next: "notify", Status: checkpoint.StatusRunning, Attempt: 2, At: at, DurationMS: 0.123,
			Journal: []checkpoint.CallRecord{{Name: "ledger", ArgsSHA256: strings.Repeat("a", 64), Result: json.RawMessage(`{"ok":true}`), At: at}},
			Effects: []checkpoint.Effect{{Key: "claim-0042:step6", Replayed: true}}},
		"everything": {RunID: strings.Repeat("r", 128), Step: 1 << 40, Name: "n", State: big, Next: "x", Status: checkpoint.StatusWaiting,
			WakeAt: at, Spend: 1.0 / 3, Error: "the claim is void", Gen: 1 << 20, Attempt: 1 << 30, At: at, DurationMS: 123456.789,
			Journal: []checkpoint.CallRecord{
				{Name: "model", ArgsSHA256: strings.Repeat("b", 64), Result: big, At: at, Replayed: true},
				{Name: "tool", ArgsSHA256: strings.Repeat("c", 64), Error: "timeout", Note: "refund key r:step4", At: at},
			},
			Effects: []checkpoint.Effect{{Key: "k1"}, {Key: "k2", Replayed: true}}},
		"fan-out": {RunID: "f", Step: 2, Name: "split", State: json.RawMessage(`{}`), Next: "sum", Status: checkpoint.StatusRunning, At: at,
			FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "pay", Input: json.RawMessage(`{"i":1}`)}, {Step: "pay", Input: big}, {Step: "pay"}}}},
		"signals": {RunID: "s", Step: 1, Name: "await", State: json.RawMessage(`{}`), Status: checkpoint.StatusCompleted, At: at, Signals: []string{"sig-1", "expired-2"}},
		"children": {RunID: "b", Step: 1, Name: "start", State: json.RawMessage(`{}`), Next: "collect", Status: checkpoint.StatusWaiting, At: at,
			Children: []checkpoint.Child{{ID: "b-1", Workflow: "claim", Input: json.RawMessage(`{"amount":1840}`)}, {ID: "b-2", Workflow: "claim"}}},
		"branch": {RunID: "f", Step: 3, Branch: 1000, Name: "pay", State: json.RawMessage(`{"paid":1}`), Status: checkpoint.StatusRunning, At: at},
		"waits": {RunID: "w", Step: 2, Name: "ask", State: json.RawMessage(`{}`), Status: checkpoint.StatusRunning, At: at,
			Resource: "model", SlotWaitMS: 1234.567, TokenResource: "anthropic", TokenWaitMS: 123456789.123},
		"token wait": {RunID: "w", Step: 2, Name: "ask", State: json.RawMessage(`{}`), Status: checkpoint.StatusRunning, At: at,
			TokenResource: strings.Repeat("a", 64), TokenWaitMS: 2000.001},
	}
	for name, cp := range cases {
		doc, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		got, want := cp.Size(), len(doc)
		if got < want || got > want+256 {
			t.Errorf("%s: Size() = %d, encoding is %d bytes: want at least that and at most 256 more", name, got, want)
		}
	}
}
