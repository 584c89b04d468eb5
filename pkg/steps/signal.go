package steps

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// SignalWait is what a step waiting for a signal asks for.
type SignalWait struct {
	Name string
	// TTL until the wait expires: the step then runs again and Signal
	// returns ErrSignalExpired. Default 72h.
	TTL time.Duration
}

// AwaitSignal parks the run until the signal name is delivered (`durable
// signal RUN NAME`, the approver's API, a signed event), holding no
// worker. The same step then runs again from its start, on the state it
// started with, and reads the signal with Context.Signal. A signal that
// came before the wait is kept and read at once: the step does not park.
// The workflow must declare name with Workflow.Signals. S is the
// workflow's state type: steps.AwaitSignal[Shipment]("delivered", ttl).
func AwaitSignal[S any](name string, ttl time.Duration) Outcome[S] {
	return Outcome[S]{kind: KindWait, signal: &SignalWait{Name: name, TTL: ttl}}
}

// ErrSignalExpired: the wait for a signal reached its TTL first.
var ErrSignalExpired = errors.New("signal wait expired")

// Signal returns the oldest signal name delivered to the run that no
// earlier step consumed, or nil when none came yet (the step should
// return AwaitSignal). When the step commits, the signals it read are
// consumed: a re-run of the step reads the same one, a later step does
// not. When none came and a wait for name expired it returns
// ErrSignalExpired (a signal that came after the expiry still wins, and
// then the expiry is spent too: a later wait for name does not see it).
func (s *Context) Signal(name string) (*checkpoint.Signal, error) {
	var expired []checkpoint.Signal
	for _, sig := range s.cfg.Signals {
		if sig.Name == name && sig.Expired {
			expired = append(expired, sig)
		}
	}
	for _, sig := range s.cfg.Signals {
		if sig.Name == name && !sig.Expired {
			s.consumed(sig.ID)
			for _, e := range expired {
				s.consumed(e.ID)
			}
			return &sig, nil
		}
	}
	if len(expired) == 0 {
		return nil, nil
	}
	for _, e := range expired {
		s.consumed(e.ID)
	}
	return nil, fmt.Errorf("signal %s of %s: %w at %s", name, s.IdempotencyKey(), ErrSignalExpired, expired[0].At.Format(time.RFC3339))
}

// consumed notes that the attempt read signal id.
func (s *Context) consumed(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.signals == nil {
		s.signals = map[string]bool{}
	}
	s.signals[id] = true
}

// ConsumedSignals returns the ids of the signals (and expiries) this
// attempt read: the worker marks them consumed when the step commits.
func (s *Context) ConsumedSignals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.signals))
	for id := range s.signals {
		out = append(out, id)
	}
	return out
}

// Signals declares the signals the workflow's steps wait for: a signal of
// another name is refused when it is sent, and AwaitSignal of another
// name is an error. Any valid token may send them through the approver's
// API; use SignalFrom to say who may.
func (w *Workflow[S]) Signals(names ...string) *Workflow[S] {
	for _, n := range names {
		w.declareSignal(n)
	}
	return w
}

// SignalFrom declares signal name, as Signals does, and that only tokens
// of one of groups may send it through the approver's API (and tokens of
// group operators, who may send any signal); others get 403. Signed
// events of the systems the approver knows, and `durable signal`, which
// needs the store, are not limited by groups. Calling it again for name
// adds groups.
//
//	steps.New[Shipment]("shipment", 1).SignalFrom("delivered", "carriers")
func (w *Workflow[S]) SignalFrom(name string, groups ...string) *Workflow[S] {
	w.declareSignal(name)
	if len(groups) == 0 {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: SignalFrom(%q) names no group: name the groups that may send it, or declare it with Signals for any token", w.name, name))
	}
	for _, g := range groups {
		if !groupRE.MatchString(g) {
			w.errs = append(w.errs, fmt.Errorf("workflow %s: signal %s: group %q: use 1-64 letters, digits, '.', '_' or '-' (as token groups)", w.name, name, g))
			continue
		}
		if w.signalGroups == nil {
			w.signalGroups = map[string][]string{}
		}
		if !slices.Contains(w.signalGroups[name], g) {
			w.signalGroups[name] = append(w.signalGroups[name], g)
		}
	}
	return w
}

// groupRE is the alphabet of token groups (durable token create).
var groupRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func (w *Workflow[S]) declareSignal(name string) {
	if !checkpoint.ValidSignalName(name) {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: signal name %q: use 1-64 letters, digits, '-' or '_'", w.name, name))
	}
	if !slices.Contains(w.signals, name) {
		w.signals = append(w.signals, name)
	}
}

// SignalNames lists the signals the workflow declared.
func (w *Workflow[S]) SignalNames() []string { return append([]string(nil), w.signals...) }

// SignalGroups lists the groups whose tokens may send signal name
// (SignalFrom), or nil when any token may.
func (w *Workflow[S]) SignalGroups(name string) []string {
	return slices.Clone(w.signalGroups[name])
}

func (w *Workflow[S]) validSignal(step string, sw *SignalWait) error {
	if sw.TTL < 0 {
		return fmt.Errorf("workflow %s step %s: signal wait TTL %s is negative", w.name, step, sw.TTL)
	}
	for _, n := range w.signals {
		if n == sw.Name {
			return nil
		}
	}
	return fmt.Errorf("workflow %s step %s: awaits signal %q, which the workflow does not declare (Workflow.Signals)", w.name, step, sw.Name)
}
