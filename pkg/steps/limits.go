package steps

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Limited is implemented by a Definition whose steps use shared resources
// (Uses); *Workflow[S] implements it. The worker asks it which resource a
// step holds a slot of, and under which fairness key a run queues.
type Limited interface {
	// Uses returns the resource step holds a slot of while it runs, or "".
	Uses(step string) string
	// FairnessKeyOf returns the fairness key of a run whose input is
	// input: "" when the workflow sets none, or when the input does not
	// decode (such runs share one key).
	FairnessKeyOf(input json.RawMessage) string
	// PriorityOf returns the priority of a run whose input is input: 0
	// when the workflow sets none, or when the input does not decode.
	PriorityOf(input json.RawMessage) int
}

// FairnessKey sets how a run's fairness key is computed from its input
// (decoded as the first step gets it): runs waiting for a resource's
// slots in a worker are served round-robin between keys and in order
// within a key, so a tenant with thousands of runs queued does not delay
// a tenant with one (among the steps the fleet's workers hold queued: at
// most the workflow consumer's MaxAckPending; see pkg/worker).
//
//	steps.New[Claim]("claim", 1).FairnessKey(func(c Claim) string { return c.Tenant })
//
// The key is a function of the input, not of the state at each step: the
// input never changes, so every worker computes the same key for every
// step of the run. Without FairnessKey (or with nil) a workflow's runs
// share one key. A run whose input does not decode, or for which fn
// panics, has the key "".
func (w *Workflow[S]) FairnessKey(fn func(input S) string) *Workflow[S] {
	w.fairness = nil
	if fn != nil {
		w.fairness = func(input json.RawMessage) (key string, err error) {
			defer recovered(&err)
			st, err := w.initial(input)
			if err != nil {
				return "", err
			}
			return fn(st), nil
		}
	}
	return w
}

// recovered turns a panic into *err (deferred): a key or priority
// function, and the input's decoding (Workflow.Init), are the user's
// code, run by the worker outside any step, where a panic would end the
// process (and the run's redelivery the next one).
func recovered(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("panic: %v", p)
	}
}

// Priority sets how a run's priority is computed from its input (decoded
// as the first step gets it): a run waiting in a worker for a resource's
// slot goes before every run of a lower priority waiting there, whatever
// their fairness keys.
// Without Priority (or with nil) every run has priority 0, and so has a
// run whose input does not decode or for which fn panics.
//
//	wf.Priority(func(c Claim) int { if c.Urgent { return 10 }; return 0 })
func (w *Workflow[S]) Priority(fn func(input S) int) *Workflow[S] {
	w.priority = nil
	if fn != nil {
		w.priority = func(input json.RawMessage) (prio int, err error) {
			defer recovered(&err)
			st, err := w.initial(input)
			if err != nil {
				return 0, err
			}
			return fn(st), nil
		}
	}
	return w
}

// PriorityOf returns the priority of a run of input (see Priority).
func (w *Workflow[S]) PriorityOf(input json.RawMessage) int {
	if w.priority == nil {
		return 0
	}
	prio, err := w.priority(input)
	if err != nil {
		return 0
	}
	return prio
}

// Uses returns the resource step holds a slot of while it runs, or "".
func (w *Workflow[S]) Uses(step string) string { return w.steps[step].cfg.uses }

// FairnessKeyOf returns the fairness key of a run of input (see
// FairnessKey).
func (w *Workflow[S]) FairnessKeyOf(input json.RawMessage) string {
	if w.fairness == nil {
		return ""
	}
	key, err := w.fairness(input)
	if err != nil {
		return ""
	}
	return key
}

// initial is the state the first step gets from input.
func (w *Workflow[S]) initial(input json.RawMessage) (S, error) {
	var st S
	switch {
	case w.init != nil:
		return w.init(input)
	case len(input) > 0 && string(input) != "null":
		return st, decodeState(input, &st)
	}
	return st, nil
}

var resourceRE = regexp.MustCompile(`^[A-Za-z0-9_-]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9_-])?$`)

// validResource checks a resource's name as pkg/flow does a limit's.
func validResource(name string) bool {
	return resourceRE.MatchString(name) && !strings.Contains(name, "..")
}
