package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// LogEntry is a tool call as a run's step log recorded it.
type LogEntry struct {
	Run  string `json:"run"`
	Step int    `json:"step"`
	Tool string `json:"tool"`
	Key  Key    `json:"key"`
	// Content is the recorded result (or its first InlineLimit bytes).
	Content string    `json:"content"`
	IsError bool      `json:"is_error,omitempty"`
	At      time.Time `json:"at"`
}

// ToolLog lists the tool calls recorded in a run's checkpoints, in step
// order. Calls that parked or were rejected before running are not calls.
func ToolLog(cps []checkpoint.Checkpoint) ([]LogEntry, error) {
	var out []LogEntry
	for _, cp := range cps {
		if cp.Name != StepTool {
			continue
		}
		for _, c := range cp.Journal {
			tool, ok := strings.CutPrefix(c.Name, "tool:")
			if !ok {
				continue
			}
			var r record
			if err := json.Unmarshal(c.Result, &r); err != nil {
				return nil, fmt.Errorf("step log of %s step %d, call %s: %w", cp.RunID, cp.Step, c.Name, err)
			}
			out = append(out, LogEntry{Run: cp.RunID, Step: cp.Step, Tool: tool, Key: Key(cp.RunID + ":step" + strconv.Itoa(cp.Step)),
				Content: r.Content, IsError: r.IsError, At: c.At})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// Reconciler compares one tool's calls with the external system they act
// on: the job that finds what idempotency keys and check-then-act could
// not prevent (an effect made by an attempt whose run then went another
// way, a record changed behind the run's back).
type Reconciler interface {
	// Tool is the tool whose calls it checks.
	Tool() string
	// Check compares a logged call with what the system holds under its
	// key: "" when they agree, else what differs (missing, other amount).
	Check(ctx context.Context, e LogEntry) (string, error)
	// Keys lists the keys the system holds for a run's effects, so
	// effects the log never recorded are found too.
	Keys(ctx context.Context, run string) ([]Key, error)
}

// Mismatch is one disagreement between a run's log and the system.
type Mismatch struct {
	Run  string `json:"run"`
	Tool string `json:"tool"`
	Key  Key    `json:"key"`
	// Kind: "differs" (the log and the system disagree), "unlogged" (the
	// system holds an effect the log has no call for).
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// Reconcile checks the tool calls of run's log (ToolLog) against r.
// Failed calls (the tool refused) are not checked, and an effect the
// system holds under a failed call's key is a mismatch.
func Reconcile(ctx context.Context, run string, log []LogEntry, r Reconciler) ([]Mismatch, error) {
	var out []Mismatch
	logged := map[Key]bool{} // false: logged as a failed call
	for _, e := range log {
		if e.Tool != r.Tool() || e.Run != run {
			continue
		}
		logged[e.Key] = !e.IsError
		if e.IsError {
			continue
		}
		detail, err := r.Check(ctx, e)
		if err != nil {
			return nil, fmt.Errorf("reconcile %s %s: %w", e.Tool, e.Key, err)
		}
		if detail != "" {
			out = append(out, Mismatch{Run: run, Tool: e.Tool, Key: e.Key, Kind: "differs", Detail: detail})
		}
	}
	keys, err := r.Keys(ctx, run)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s of %s: list the system's keys: %w", r.Tool(), run, err)
	}
	for _, k := range keys {
		ok, seen := logged[k]
		switch {
		case !seen:
			out = append(out, Mismatch{Run: run, Tool: r.Tool(), Key: k, Kind: "unlogged",
				Detail: "the system holds an effect under this key; the run's log records no call with it"})
		case !ok:
			out = append(out, Mismatch{Run: run, Tool: r.Tool(), Key: k, Kind: "differs",
				Detail: "the run's log records this call as failed; the system holds an effect under its key"})
		}
	}
	return out, nil
}
