// Package e2e holds process-level tests: real worker processes built from
// cmd/durable, killed with SIGKILL at each boundary of the step protocol,
// against a real nats-server and real stores.
package e2e
