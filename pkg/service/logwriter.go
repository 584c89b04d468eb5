package service

import (
	"bytes"
	"io"
	"sync"
)

// pipeBuf is the largest write a pipe takes whole (POSIX PIPE_BUF on
// Linux): a group of lines is written in pieces of at most this many
// bytes, cut between lines, so that no line of one process is torn by
// another's writing to the same pipe, as with a write per line.
const pipeBuf = 4096

// groupWriter writes log lines to w as group commit does: while one
// write is in flight, the lines logged meanwhile wait in a buffer, and
// the next write takes them all, one system call for many lines where a
// worker logs a line per step. Write returns once its line is written,
// as with w itself, so a line logged before a crash or an exit is not
// lost, and each goroutine's lines keep their order.
type groupWriter struct {
	w io.Writer

	mu      sync.Mutex
	flushed *sync.Cond // broadcast after each group is written
	writing bool       // a caller is writing; the others queue
	pending []byte     // lines queued for the next group
	spare   []byte     // the buffer of the group written last, reused
	next    uint64     // number of the group pending collects
	done    uint64     // number of the last group written
	err     error      // the error of the last group written
}

func newGroupWriter(w io.Writer) *groupWriter {
	g := &groupWriter{w: w, next: 1}
	g.flushed = sync.NewCond(&g.mu)
	return g
}

// maxPending bounds what waits for a slow writer: past it, a caller
// waits for room, as it would in a write of its own.
const maxPending = 1 << 20

func (g *groupWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	if g.writing {
		for len(g.pending) > maxPending {
			g.flushed.Wait()
		}
		g.pending = append(g.pending, p...)
		mine := g.next
		for g.done < mine {
			g.flushed.Wait()
		}
		err := g.err
		g.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	g.writing = true
	g.mu.Unlock()
	n, err := g.w.Write(p)
	// Write what queued meanwhile, until nothing does.
	for {
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.writing = false
			g.mu.Unlock()
			return n, err
		}
		group := g.pending
		g.pending, g.spare = g.spare[:0], nil
		g.next++
		g.mu.Unlock()
		gerr := writeLines(g.w, group)
		g.mu.Lock()
		g.spare = group[:0]
		g.done++
		g.err = gerr
		g.flushed.Broadcast()
		g.mu.Unlock()
	}
}

// writeLines writes b in pieces of at most pipeBuf bytes cut after a
// newline (a longer line is one piece of its own).
func writeLines(w io.Writer, b []byte) error {
	for len(b) > 0 {
		cut := len(b)
		if cut > pipeBuf {
			cut = bytes.LastIndexByte(b[:pipeBuf], '\n') + 1
			if cut == 0 { // one line longer than pipeBuf
				cut = bytes.IndexByte(b, '\n') + 1
				if cut == 0 {
					cut = len(b)
				}
			}
		}
		if _, err := w.Write(b[:cut]); err != nil {
			return err
		}
		b = b[cut:]
	}
	return nil
}
