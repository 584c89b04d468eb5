package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows what the bench is doing: a bar redrawn in place when its
// writer is a terminal, one plain line per finished phase otherwise. A
// nil *progress prints nothing.
type progress struct {
	w   io.Writer
	tty bool

	mu    sync.Mutex
	label string
	total int
	began time.Time
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// begin starts a phase of total units (steps or runs).
func (p *progress) begin(label string, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.total, p.began = label, total, time.Now()
	p.draw(0)
}

// update redraws the bar at done units; only on a terminal.
func (p *progress) update(done int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(done)
}

func (p *progress) draw(done int) {
	if !p.tty || p.total <= 0 {
		return
	}
	const width = 30
	filled := min(width, done*width/p.total)
	fmt.Fprintf(p.w, "\r\033[K%-36s [%s%s] %d/%d %.1fs", p.label,
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, p.total, time.Since(p.began).Seconds())
}

// end finishes the phase with a summary line.
func (p *progress) end(format string, a ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%-36s %s\n", p.label, fmt.Sprintf(format, a...))
	p.total = 0
}

// linef prints a line outside any phase.
func (p *progress) linef(format string, a ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.total > 0 {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", a...)
	p.total = 0
}
