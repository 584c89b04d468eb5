// Command research is a worker binary built outside durable's module, on
// its public packages only: the research agent (research.go) and its
// child workflow summarize, with every flag, variable and endpoint of
// `durable worker` (run it with -h). See README.md.
//
//	research --nats nats://127.0.0.1:4222
package main

import (
	"net/http"
	"os"
	"time"

	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/workercmd"
)

func main() {
	ttl := time.Hour
	if v, err := time.ParseDuration(os.Getenv("RESEARCH_REVIEW_TTL")); err == nil && v > 0 {
		ttl = v
	}
	web := &http.Client{Timeout: 30 * time.Second}
	workercmd.Main(workercmd.Config{
		Name:     "research",
		Registry: steps.NewRegistry().MustRegister(research(web, ttl), summarizer()),
	})
}
