// Command askworker is the worker binary of the rate-limit fleet test
// (internal/test/ratelimits): workflow askflow on the Anthropic adapter,
// pointed at the fake provider at ASK_PROVIDER_URL; every flag of
// `durable worker`.
package main

import (
	"fmt"
	"os"

	"github.com/durable-run/durable/internal/test/ratelimits/askflow"
	"github.com/durable-run/durable/pkg/model/anthropic"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/workercmd"
)

func main() {
	m, err := anthropic.New(anthropic.Options{APIKey: "test-key", Model: "claude-test", BaseURL: os.Getenv("ASK_PROVIDER_URL")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "askworker:", err)
		os.Exit(2)
	}
	workercmd.Main(workercmd.Config{Name: "askworker", Registry: steps.NewRegistry().MustRegister(askflow.Workflow(m))})
}
