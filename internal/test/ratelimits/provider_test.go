package ratelimits

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// provider is a fake Anthropic Messages API: it answers every request,
// and records when; once told to (overload), it answers 429 with
// Retry-After for that long to every request, as a provider over its own
// limit does.
type provider struct {
	URL string

	mu         sync.Mutex
	ok         []time.Time
	refused    []time.Time
	overloadIn time.Duration // the next request starts an overload this long
	overUntil  time.Time
}

func startProvider(t testing.TB) *provider {
	t.Helper()
	p := &provider{}
	srv := httptest.NewServer(p) // on 127.0.0.1
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

const answer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test",` +
	`"content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,` +
	`"usage":{"input_tokens":5,"output_tokens":1}}`

const tooMany = `{"type":"error","error":{"type":"rate_limit_error","message":"too many requests"}}`

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	p.mu.Lock()
	if p.overloadIn > 0 {
		p.overUntil, p.overloadIn = now.Add(p.overloadIn), 0
	}
	refuse := now.Before(p.overUntil)
	wait := p.overUntil.Sub(now)
	if refuse {
		p.refused = append(p.refused, now)
	} else {
		p.ok = append(p.ok, now)
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if refuse {
		w.Header().Set("Retry-After", fmt.Sprint(int((wait+time.Second-1)/time.Second)))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, tooMany)
		return
	}
	_, _ = io.WriteString(w, answer)
}

// overload makes the next request start an overload of d: it and every
// request in the next d are answered 429 with Retry-After: d.
func (p *provider) overload(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.overloadIn = d
}

// answered is how many requests were answered 200 in [from, to).
func (p *provider) answered(from, to time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.ok {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// counts are the requests answered 200 and 429 so far, the time of the
// first and last 200, and of the 429s.
func (p *provider) counts() (ok int, first, last time.Time, refused []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ok) > 0 {
		first, last = p.ok[0], p.ok[len(p.ok)-1]
	}
	return len(p.ok), first, last, append([]time.Time(nil), p.refused...)
}

// slowDown has the provider refuse for d from its next request and
// returns what the fleet did: the 429s, and how long after the first of
// them the next request was answered 200.
func (p *provider) slowDown(t testing.TB, d time.Duration) (refused int, quiet time.Duration) {
	t.Helper()
	_, _, _, before := p.counts()
	p.overload(d)
	deadline := time.Now().Add(d + 10*time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		p.mu.Lock()
		var first429, next200 time.Time
		if len(p.refused) > len(before) {
			first429 = p.refused[len(before)]
			for _, at := range p.ok {
				if at.After(first429) {
					next200 = at
					break
				}
			}
		}
		n := len(p.refused) - len(before)
		p.mu.Unlock()
		if !next200.IsZero() {
			return n, next200.Sub(first429)
		}
	}
	t.Fatalf("no 429 and then a 200 within %s of the overload", d+10*time.Second)
	return 0, 0
}
