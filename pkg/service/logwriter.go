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

// groupWriter writes log lines to w as group commit does: the lines
// logged while a write is in flight wait in a buffer, and the next write
// takes them all, one system call for many lines where a worker logs a
// line per step. A goroutine of its own writes, started when a line comes
// and gone once none is pending (no goroutine outlives a quiet logger);
// a Write returns once
// its line is written (with that write's error), as with w itself, so a
// line logged before a crash or an exit is not lost, and each
// goroutine's lines keep their order.
type groupWriter struct {
	w io.Writer

	mu      sync.Mutex
	room    *sync.Cond // broadcast when the writer takes the pending group
	cur     *group     // the lines pending for the next write
	spare   []byte     // the buffer of the group written last, reused
	writing bool       // the writing goroutine runs
}

// group is the lines one write takes, and its outcome.
type group struct {
	buf     []byte
	err     error
	written chan struct{} // closed once buf is written
}

func newGroupWriter(w io.Writer) *groupWriter {
	g := &groupWriter{w: w, cur: &group{written: make(chan struct{})}}
	g.room = sync.NewCond(&g.mu)
	return g
}

// maxPending bounds what waits for a slow writer: past it, a caller
// waits for room, as it would in a write of its own.
const maxPending = 1 << 20

func (g *groupWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	for len(g.cur.buf) > maxPending {
		g.room.Wait()
	}
	g.cur.buf = append(g.cur.buf, p...)
	mine := g.cur
	if !g.writing {
		g.writing = true
		go g.writeGroups()
	}
	g.mu.Unlock()
	<-mine.written
	if mine.err != nil {
		return 0, mine.err
	}
	return len(p), nil
}

// writeGroups writes the pending lines, a group at a time, until none
// is pending.
func (g *groupWriter) writeGroups() {
	for {
		g.mu.Lock()
		grp := g.cur
		if len(grp.buf) == 0 {
			g.writing = false
			g.mu.Unlock()
			return
		}
		g.cur = &group{buf: g.spare[:0], written: make(chan struct{})}
		g.spare = nil
		g.room.Broadcast()
		g.mu.Unlock()
		grp.err = writeLines(g.w, grp.buf)
		close(grp.written)
		g.mu.Lock()
		g.spare = grp.buf[:0]
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
