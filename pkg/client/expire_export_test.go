package client

// The message builders of the batch expiry, for the test that keeps them
// the same as pkg/queue's publishers.
var (
	StepMessage   = stepMessage
	EventMessage  = eventMessage
	StatusMessage = statusMessage
)
