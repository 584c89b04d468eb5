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
// takes delay(), and it counts the requests in flight (in all, per
// calling worker process and per tenant) and their peaks, each run's
// calls per turn, and the order in which calls ended. The tenant is the
// request's, as the step sends it (?tenant=).
type provider struct {
	URL    string
	delay  func() time.Duration
	limit  int
	perKey int // the limit per tenant, 0: none

	mu       sync.Mutex
	inflight int
	peak     int
	byPid    map[int]int    // calls in flight per worker pid
	byCaller map[caller]int // calls in flight per worker pid and tenant
	byTenant map[string]int // calls in flight per tenant
	tenants  map[string]*peaks
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

// caller is who made a call: a worker process, for a tenant.
type caller struct {
	pid    int
	tenant string
}

// peaks is what the provider saw of one tenant.
type peaks struct {
	// All is the most calls in flight at once; SinceKill the most since
	// a worker was killed (its calls until they ended too).
	All, SinceKill int
	// FullAgain is when, after a kill, the live workers first had perKey
	// calls of the tenant in flight.
	FullAgain time.Time
}

func startProvider(t *testing.T, lim limits, delay func() time.Duration) *provider {
	t.Helper()
	p := &provider{delay: delay, limit: lim.all, perKey: lim.perKey, byPid: map[int]int{}, byCaller: map[caller]int{},
		byTenant: map[string]int{}, tenants: map[string]*peaks{}, calls: map[string][]int{}, dead: map[int]bool{}}
	srv := httptest.NewServer(p) // on 127.0.0.1
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pid, _ := strconv.Atoi(r.Header.Get("X-Worker-Pid"))
	q := r.URL.Query()
	run, turn, c := q.Get("run"), q.Get("turn"), caller{pid: pid, tenant: q.Get("tenant")}
	gate := p.enter(c, run+"/"+turn)
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
	p.byCaller[c]--
	p.byTenant[c.tenant]--
	p.ended = append(p.ended, run)
	p.mu.Unlock()
}

// enter counts a call of turn ("run/turn") by c coming in, and returns
// the gate it waits for (nil: none).
func (p *provider) enter(c caller, turn string) (gate chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.inflight++
	p.byPid[c.pid]++
	p.byCaller[c]++
	p.byTenant[c.tenant]++
	p.peak = max(p.peak, p.inflight)
	p.calls[turn] = append(p.calls[turn], c.pid)
	p.total++
	pk := p.tenants[c.tenant]
	if pk == nil {
		pk = &peaks{}
		p.tenants[c.tenant] = pk
	}
	pk.All = max(pk.All, p.byTenant[c.tenant])
	if !p.killedAt.IsZero() {
		pk.SinceKill = max(pk.SinceKill, p.byTenant[c.tenant])
		if p.fullAgain.IsZero() && p.liveInflight() >= p.limit {
			p.fullAgain = now
		}
		if pk.FullAgain.IsZero() && p.perKey > 0 && p.liveOf(c.tenant) >= p.perKey {
			pk.FullAgain = now
		}
	}
	return p.gate
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

// liveOf is how many calls of tenant are in flight from workers not
// killed (p.mu held).
func (p *provider) liveOf(tenant string) int {
	n := p.byTenant[tenant]
	for pid := range p.dead {
		n -= p.byCaller[caller{pid: pid, tenant: tenant}]
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

// tenantPeaks is what the provider saw of each tenant so far.
func (p *provider) tenantPeaks() map[string]peaks {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]peaks{}
	for t, pk := range p.tenants {
		out[t] = *pk
	}
	return out
}

// busiestFor is the pid with the most calls of tenant in flight now.
func (p *provider) busiestFor(tenant string) (pid, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, k := range p.byCaller {
		if c.tenant == tenant && k > n {
			pid, n = c.pid, k
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
