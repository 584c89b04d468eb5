// Package client starts, decides, cancels and inspects runs. The CLI and
// your own services use it; it talks to the same store and step stream as
// the workers, and never runs steps itself.
//
//	cl := client.New(js, store)
//	run, created, err := cl.Start(ctx, client.StartRequest{
//		Workflow: "claim", RunID: "claim-0042", Input: ClaimInput{Amount: 1840}, // or JSON: json.RawMessage(`{"amount": 1840}`)
//	})
//	// ... later, when the run is parked for approval:
//	_, err = cl.Decide(ctx, client.Decision{RunID: "claim-0042", By: "ana", Channel: client.ChannelAPI})
//
// Start is idempotent by run id: starting an existing id with the same
// workflow and input returns the existing run and does not restart it.
package client
