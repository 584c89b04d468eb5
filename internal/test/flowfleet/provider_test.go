package flowfleet

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// provider is the fake model provider the agents call: each request
// takes delay(), and it counts the requests in flight (in all, and per
// calling worker process) and the peak, each run's calls per turn, and
// the order in which calls ended.
type provider struct {
	URL   string
	delay func() time.Duration
	limit int

	mu       sync.Mutex
	inflight int
	peak     int
	byPid    map[int]int      // calls in flight per worker pid
	calls    map[string][]int // "run/turn" -> the pids that called, in order
	total    int
	ended    []string // run ids, in the order their calls ended
	dead     map[int]bool
	// gate, while not nil, holds every call until it is closed.
	gate     chan struct{}
	killedAt time.Time
	// fullAgain is when, after a kill, the live workers first had limit
	// calls in flight: the dead worker's slots were back in use.
	fullAgain time.Time
}

func startProvider(t *testing.T, limit int, delay func() time.Duration) *provider {
	t.Helper()
	p := &provider{delay: delay, limit: limit, byPid: map[int]int{}, calls: map[string][]int{}, dead: map[int]bool{}}
	srv := httptest.NewServer(p) // on 127.0.0.1
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pid, _ := strconv.Atoi(r.Header.Get("X-Worker-Pid"))
	run, turn := r.URL.Query().Get("run"), r.URL.Query().Get("turn")
	p.mu.Lock()
	p.inflight++
	p.byPid[pid]++
	p.peak = max(p.peak, p.inflight)
	p.calls[run+"/"+turn] = append(p.calls[run+"/"+turn], pid)
	p.total++
	if !p.killedAt.IsZero() && p.fullAgain.IsZero() && p.liveInflight() >= p.limit {
		p.fullAgain = time.Now()
	}
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}
	t := time.NewTimer(p.delay())
	select {
	case <-t.C:
	case <-r.Context().Done(): // the caller died
		t.Stop()
	}
	p.mu.Lock()
	p.inflight--
	p.byPid[pid]--
	p.ended = append(p.ended, run)
	p.mu.Unlock()
}

// hold makes calls wait until the returned func is called.
func (p *provider) hold() (open func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
	gate := p.gate
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.gate == gate {
			close(gate)
			p.gate = nil
		}
	}
}

// liveInflight is how many calls are in flight from workers not killed
// (p.mu held).
func (p *provider) liveInflight() int {
	n := p.inflight
	for pid := range p.dead {
		n -= p.byPid[pid]
	}
	return n
}

// killing records that pid is about to be killed.
func (p *provider) killing(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead[pid] = true
	p.killedAt = time.Now()
}

func (p *provider) stats() (total, peak int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total, p.peak
}

// busiest is the pid with the most calls in flight now.
func (p *provider) busiest() (pid, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, c := range p.byPid {
		if c > n {
			pid, n = id, c
		}
	}
	return pid, n
}

// callers is the set of pids that called.
func (p *provider) callers() map[int]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int]bool{}
	for _, pids := range p.calls {
		for _, pid := range pids {
			out[pid] = true
		}
	}
	return out
}
