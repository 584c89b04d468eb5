package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
)

// UsageError is a mistake in the command line or the configuration: the
// process stops with exit code 2 instead of retrying.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef formats a UsageError.
func Usagef(format string, a ...any) error { return UsageError{Msg: fmt.Sprintf(format, a...)} }

// FatalError ends KeepTrying with its error: retrying cannot help (the
// listener died).
type FatalError struct{ Err error }

func (e FatalError) Error() string { return e.Err.Error() }
func (e FatalError) Unwrap() error { return e.Err }

// Exit codes of the durable binaries.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitUsage  = 2 // a UsageError, or -h
)

// ExitCode maps a command's error to its exit code: 0 for nil, 2 for a
// UsageError or flag.ErrHelp, 1 otherwise.
func ExitCode(err error) int {
	var u UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u), errors.Is(err, flag.ErrHelp):
		return ExitUsage
	}
	return ExitFailed
}

// NewFlagSet returns a flag set that reports its errors (and -h) on stderr
// and returns them instead of exiting.
func NewFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// NewLogger returns a JSON logger at DURABLE_LOG_LEVEL (default info; an
// empty or unknown level never silences logging). Lines logged at once by
// many goroutines go to w together, a write for many lines (a worker logs
// one per step); each call still returns once its line is written.
func NewLogger(w io.Writer, component string) zerolog.Logger {
	level := zerolog.InfoLevel
	if v := os.Getenv("DURABLE_LOG_LEVEL"); v != "" {
		if l, err := zerolog.ParseLevel(v); err == nil && l != zerolog.NoLevel {
			level = l
		}
	}
	return zerolog.New(newGroupWriter(w)).Level(level).With().Timestamp().Str("component", component).Logger()
}

// ParseArgs parses flags that may come before or after positional
// arguments (`durable runs show RUN --json`) and returns the positionals.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, UsageError{Msg: err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// MetricsUsage is the help of every long-running command's --metrics.
const MetricsUsage = "address to serve /metrics (Prometheus), /healthz and /readyz on, e.g. 127.0.0.1:9464 (default: off)"
