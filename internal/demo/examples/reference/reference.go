// Package reference registers the example workflows of the reference
// worker (cmd/worker and `durable worker`).
package reference

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/durable-run/durable/internal/demo/examples/agentloop"
	"github.com/durable-run/durable/internal/demo/examples/claim"
	"github.com/durable-run/durable/internal/demo/examples/claimsbatch"
	"github.com/durable-run/durable/internal/demo/examples/fanout"
	"github.com/durable-run/durable/internal/demo/examples/refundagent"
	"github.com/durable-run/durable/internal/demo/examples/shipment"
	"github.com/durable-run/durable/internal/faults"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
	"github.com/durable-run/durable/pkg/workercmd"
)

// Worker is the reference worker's configuration: its workflows, and
// crash injection from DURABLE_CRASH for the demo and the tests.
func Worker() (workercmd.Config, error) {
	hooks, err := Hooks()
	if err != nil {
		return workercmd.Config{}, err
	}
	return workercmd.Config{Registry: Workflows(), Hooks: hooks}, nil
}

// Hooks are the crash faults DURABLE_CRASH plans (internal/faults).
func Hooks() ([]worker.Hook, error) {
	hooks, err := faults.Hooks(os.Getenv("DURABLE_CRASH"))
	if err != nil {
		return nil, fmt.Errorf("DURABLE_CRASH: %w", err)
	}
	return hooks, nil
}

// Workflows registers the example workflows. The claim and fanout workflows pay
// through DURABLE_PAYMENTS_URL and reads claims from DURABLE_CLAIMS_URL
// (optional). The refund-agent pays through the same API; its model is
// Anthropic's or OpenAI's when ANTHROPIC_API_KEY or OPENAI_API_KEY is
// set, else a recorded transcript.
func Workflows() *steps.Registry {
	return steps.NewRegistry().MustRegister(
		claim.New(claim.Config{
			PaymentsURL: os.Getenv("DURABLE_PAYMENTS_URL"),
			ClaimsURL:   os.Getenv("DURABLE_CLAIMS_URL"),
			// Keyed payments are counted: provider replays and refusals
			// of a key reused with another body.
			HTTP: &http.Client{Timeout: 10 * time.Second, Transport: metrics.Default().Transport("payments", nil)},
		}),
		fanout.New(fanout.Config{
			PaymentsURL: os.Getenv("DURABLE_PAYMENTS_URL"),
			HTTP:        &http.Client{Timeout: 10 * time.Second, Transport: metrics.Default().Transport("payments", nil)},
		}),
		claimsbatch.New(),
		shipment.New(),
		agentloop.New(),
		refundagent.New(refundagent.Config{
			PaymentsURL: os.Getenv("DURABLE_PAYMENTS_URL"),
			HTTP:        &http.Client{Timeout: 30 * time.Second, Transport: metrics.Default().Transport("payments", nil)},
			Prices:      modelPrices(),
		}),
	)
}

// modelPrices reads DURABLE_MODEL_PRICES ("model=input/output,..." per
// million tokens); a malformed value is reported once and ignored, so a
// typo costs the spend figures, not the worker.
func modelPrices() agent.Prices {
	p, err := agent.ParsePrices(os.Getenv("DURABLE_MODEL_PRICES"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "durable: DURABLE_MODEL_PRICES ignored: %v\n", err)
		return nil
	}
	return p
}
