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

// AwaitSignal parks the run until signal sig is delivered (`durable
// signal RUN NAME`, the approver's API, a signed event), holding no
// worker, for at most ttl (0: SignalWait's default). The same step then
// runs again from its start, on the state it started with, and reads the
// signal with Context.Signal. A signal that came before the wait is kept
// and read at once: the step does not park. Recv reads and waits in one
// call.
func AwaitSignal[S any](sig SignalRef[S], ttl time.Duration) Outcome[S] {
	return Outcome[S]{kind: KindWait, signal: &SignalWait{Name: sig.name, TTL: ttl}}
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
// (Workflow.Signal), or nil when any token may.
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
	return fmt.Errorf("workflow %s step %s: awaits signal %q, which the workflow does not declare (Workflow.Signal)", w.name, step, sw.Name)
}
