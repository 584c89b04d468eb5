package cli_test

import (
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// The refund agent through the operator's commands: start, approve the
// parked refund, and `runs show` tells each model call, tool call and
// the approval; one refund is paid.
func TestRefundAgentThroughTheCLI(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const id = "refund-cli"
		e.mustCLI(0, "start", "refund-agent", "--id", id, "--input", `{"order_id": "A-1001", "message": "My blender arrived broken."}`)
		parked := e.waitStatus(id, checkpoint.StatusWaiting)
		if parked.Step != 4 || parked.Wait.Group != "supervisors" || !strings.Contains(string(parked.Wait.Payload), `"tool":"refund"`) {
			t.Fatalf("parked at step %d: %+v", parked.Step, parked.Wait)
		}
		e.mustCLI(0, "approve", id, "--by", "sam", "--reason", "photos show the damage")
		e.waitStatus(id, checkpoint.StatusCompleted)
		if ps := e.paymentsFor(id); len(ps) != 1 || ps[0].Amount != 149 || ps[0].Key != id+":step4" {
			t.Fatalf("payments of %s: %+v, want one refund of 149", id, ps)
		}

		text := e.mustCLI(0, "runs", "show", id).stdout
		t.Logf("runs show %s:\n%s", id, text)
		for _, s := range []string{
			// each model call: model, tokens, what it chose
			"model [scripted-refund-agent: 612 in + 58 out tokens, calls lookup_order]",
			"model [scripted-refund-agent: 803 in + 91 out tokens, calls refund]",
			"model [scripted-refund-agent: 951 in + 47 out tokens, answers]",
			// each tool call: tool, key, result
			"tool:lookup_order [lookup_order key " + id + ":step2:",
			"tool:refund [refund key " + id + ":step4:",
			// the approval, on the exact call
			"PARKED", "DECISION", "approved by sam via cli", "payload sha256 " + parked.Wait.PayloadSHA256,
			"effect " + id + ":step4",
		} {
			if !strings.Contains(text, s) {
				t.Errorf("runs show lacks %q:\n%s", s, text)
			}
		}
		v := e.showJSON(id)
		if apps, _ := v["approvals"].([]any); len(apps) != 1 || apps[0].(map[string]any)["payload_sha256"] != parked.Wait.PayloadSHA256 {
			t.Errorf("approvals %v", v["approvals"])
		}
	})
}
