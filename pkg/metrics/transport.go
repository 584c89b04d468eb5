package metrics

import "net/http"

// Transport wraps base (nil: http.DefaultTransport) so that the answers of
// a tool's API to keyed requests (an Idempotency-Key header) are counted
// under tool: Idempotent-Replayed: true in
// durable_tool_idempotent_replays_total, and 422 (the key was already used
// with another payload) in durable_idempotency_conflicts_total. Use it for
// the HTTP client of every tool that honours idempotency keys.
func (m *Metrics) Transport(tool string, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, replays: m.toolReplays.WithLabelValues(tool), conflicts: m.toolConflicts.WithLabelValues(tool)}
}

type transport struct {
	base      http.RoundTripper
	replays   interface{ Inc() }
	conflicts interface{ Inc() }
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || r.Header.Get("Idempotency-Key") == "" {
		return resp, err
	}
	switch {
	case resp.StatusCode == http.StatusUnprocessableEntity:
		t.conflicts.Inc()
	case resp.StatusCode/100 == 2 && resp.Header.Get("Idempotent-Replayed") == "true":
		t.replays.Inc()
	}
	return resp, nil
}
