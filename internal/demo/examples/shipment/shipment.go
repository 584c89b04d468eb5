// Package shipment is the reference workflow of signals: a run waits,
// holding no worker, for the signal "delivered" from the shipping system
// (`durable signal RUN delivered --data JSON`, the approver's API, or a
// signed event); it keeps the signal's data and completes, or fails with
// the reason when the TTL passes first.
package shipment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// Name, Version and the signal of the workflow.
const (
	Name      = "shipment"
	Version   = 1
	Delivered = "delivered"
	// DefaultTTL when the input names none.
	DefaultTTL = "72h"
)

// Input of a run: {"ttl": "<Go duration>"}.
type Input struct {
	TTL string `json:"ttl"`
}

// State of a run.
type State struct {
	TTL string `json:"ttl"`
	// Delivered is the data of the delivered signal.
	Delivered   json.RawMessage `json:"delivered,omitempty"`
	DeliveredBy string          `json:"delivered_by,omitempty"`
}

// New returns the shipment workflow.
func New() *steps.Workflow[State] {
	w := steps.New[State](Name, Version).
		Init(initState).
		InputSchema(`{"type": "object", "additionalProperties": false, "properties": {
			"ttl": {"type": "string", "minLength": 2, "description": "how long to wait for the delivered signal, a Go duration, default 72h"}}}`)
	delivered := w.Signal(Delivered)
	w.Step("await-delivery", func(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
		return awaitDelivery(s, delivered, st)
	})
	return w
}

func initState(raw json.RawMessage) (State, error) {
	var in Input
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return State{}, err
		}
	}
	st := State{TTL: in.TTL}
	if st.TTL == "" {
		st.TTL = DefaultTTL
	}
	return st, nil
}

func awaitDelivery(s *steps.Context, delivered steps.SignalRef[State], st State) (steps.Outcome[State], error) {
	ttl, err := time.ParseDuration(st.TTL)
	if err != nil || ttl <= 0 {
		return steps.Fail(st, fmt.Sprintf("ttl %q: want a positive Go duration such as 72h", st.TTL)), nil
	}
	sig, wait, err := steps.Recv(s, delivered, ttl)
	if errors.Is(err, steps.ErrSignalExpired) {
		return steps.Fail(st, fmt.Sprintf("no %s signal within %s", Delivered, st.TTL)), nil
	}
	if sig == nil {
		return wait, err // parks until it comes
	}
	st.Delivered, st.DeliveredBy = sig.Data, sig.By
	return steps.Complete(st), nil
}
