package service

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowWriter records each write and takes a millisecond over it, as a
// terminal or a log collector's pipe may.
type slowWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes []int
}

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, len(p))
	return s.buf.Write(p)
}

// Lines logged at once are written whole, in each goroutine's order, each
// written before its Write returns, and in fewer writes than lines.
func TestGroupWriterWritesLinesTogether(t *testing.T) {
	const goroutines, lines = 8, 100
	sw := &slowWriter{}
	g := newGroupWriter(sw)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range lines {
				line := fmt.Sprintf("{\"g\":%d,\"n\":%d}\n", i, j)
				if n, err := g.Write([]byte(line)); err != nil || n != len(line) {
					t.Errorf("Write: %d, %v", n, err)
					return
				}
				sw.mu.Lock()
				written := strings.Contains(sw.buf.String(), line)
				sw.mu.Unlock()
				if !written {
					t.Errorf("Write of %q returned before the line was written", line)
					return
				}
			}
		}()
	}
	wg.Wait()
	next := make([]int, goroutines)
	got := strings.Split(strings.TrimSuffix(sw.buf.String(), "\n"), "\n")
	if len(got) != goroutines*lines {
		t.Fatalf("%d lines written, want %d", len(got), goroutines*lines)
	}
	for _, l := range got {
		var i, n int
		if _, err := fmt.Sscanf(l, "{\"g\":%d,\"n\":%d}", &i, &n); err != nil {
			t.Fatalf("a torn line %q: %v", l, err)
		}
		if n != next[i] {
			t.Fatalf("goroutine %d's line %d came where %d was due", i, n, next[i])
		}
		next[i]++
	}
	if len(sw.writes) > goroutines*lines/2 {
		t.Errorf("%d writes for %d lines logged at once: they were not grouped", len(sw.writes), goroutines*lines)
	}
	t.Logf("%d lines in %d writes", goroutines*lines, len(sw.writes))
}

// A group is written in pieces of at most pipeBuf bytes cut after a line,
// and a line longer than that alone.
func TestWriteLinesCutsBetweenLines(t *testing.T) {
	line := strings.Repeat("x", 999) + "\n"
	long := strings.Repeat("y", 5000) + "\n"
	var in bytes.Buffer
	for range 9 {
		in.WriteString(line)
	}
	in.WriteString(long)
	in.WriteString(line)
	sw := &slowWriter{}
	if err := writeLines(sw, in.Bytes()); err != nil {
		t.Fatal(err)
	}
	if sw.buf.String() != in.String() {
		t.Fatal("the bytes written differ from the group")
	}
	want := []int{4000, 4000, 1000, 5001, 1000}
	if fmt.Sprint(sw.writes) != fmt.Sprint(want) {
		t.Fatalf("pieces %v, want %v", sw.writes, want)
	}
}

// gateWriter blocks its writes until open is closed, as a full pipe does.
type gateWriter struct {
	open chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

// Past maxPending queued behind a blocked write, callers wait for room;
// once the write goes through, every line is written and every Write
// returns. (A first version left a caller that had waited for room with
// its line queued and nobody to write it: review of the writer.)
func TestGroupWriterWaitsForRoomAndGoesOn(t *testing.T) {
	gw := &gateWriter{open: make(chan struct{})}
	g := newGroupWriter(gw)
	line := strings.Repeat("z", 64<<10-1) + "\n"
	const lines = 40 // 2.5 MiB: over maxPending behind the blocked write
	var wg sync.WaitGroup
	for range lines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Write([]byte(line)); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // let them queue, some waiting for room
	close(gw.open)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Writes still blocked 10 s after the writer went through")
	}
	if got := gw.buf.Len(); got != lines*len(line) {
		t.Fatalf("%d bytes written, want %d", got, lines*len(line))
	}
}
