// Command durable is the operator CLI and the all-in-one `durable dev` and
// `durable demo`.
package main

import (
	"os"

	"github.com/durable-run/durable/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
