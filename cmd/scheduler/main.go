// Command scheduler sweeps expired waits, durable timers and stuck runs.
// Run several replicas for availability; each deadline is handled once.
package main

import "github.com/durable-run/durable/pkg/schedulercmd"

func main() { schedulercmd.Main() }
