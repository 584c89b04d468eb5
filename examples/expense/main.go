// Command expense is a worker binary built outside durable's module, on
// its public packages only: the expense workflow, and every flag,
// variable and endpoint of `durable worker` (run it with -h).
//
//	DURABLE_PAYMENTS_URL=http://127.0.0.1:8080/demo/payments expense --nats nats://127.0.0.1:4222
package main

import (
	"os"

	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/workercmd"
)

func main() {
	url := os.Getenv("DURABLE_PAYMENTS_URL")
	if url == "" {
		url = "http://127.0.0.1:8080/demo/payments"
	}
	workercmd.Main(workercmd.Config{
		Name:     "expense",
		Registry: steps.NewRegistry().MustRegister(workflow(url)),
	})
}
