package payments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrClosed is returned for requests after Close.
var ErrClosed = errors.New("payments store closed")

// recordFile is the append-only records file: one JSON Payment per line, the latest
// line for a key wins. Updating a counter appends a snapshot instead of
// rewriting in place, so a crash can only ever tear the last line.
type recordFile struct {
	f    *os.File
	size int64 // bytes known good; a failed append is cut back to this
	// broken is set by a failed write or fsync. After a failed fsync the page
	// cache no longer says what is on disk, so the only safe move is to stop
	// writing and let a restart re-read the file.
	broken error
}

// openRecordFile reads every record at path, creating the file if needed. A torn
// tail (an unterminated or unparsable last line left by a crash mid-append) is
// cut off; an unparsable line followed by good ones is corruption and fails.
func openRecordFile(path string) (*recordFile, []Payment, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("open payments file %s: %w", path, err)
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open payments file %s: %w", path, err)
	}
	l := &recordFile{f: f}
	recs, err := l.load(path)
	if err == nil && created {
		// The file's directory entry must be durable too, or the first
		// payment can vanish with the file it was written to.
		err = syncDir(dir)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return l, recs, nil
}

func (l *recordFile) load(path string) ([]Payment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read payments file %s: %w", path, err)
	}
	var (
		recs    []Payment
		good    int64 // end of the last good line
		badAt   = -1  // offset of the first bad line, if any
		badLine int
	)
	off, lineNo := 0, 0
	for off < len(data) {
		lineNo++
		end := bytes.IndexByte(data[off:], '\n')
		var line []byte
		next := len(data)
		if end >= 0 {
			line, next = data[off:off+end], off+end+1
		} else {
			line = data[off:] // unterminated: the append never finished
		}
		var p Payment
		ok := end >= 0 && json.Unmarshal(line, &p) == nil && p.ID != "" && p.Key != ""
		switch {
		case ok && badAt >= 0:
			return nil, fmt.Errorf("payments file %s: line %d is corrupt but later records follow; repair or move the file aside", path, badLine)
		case ok:
			recs = append(recs, p)
			good = int64(next)
		case badAt < 0:
			badAt, badLine = off, lineNo
		}
		off = next
	}
	if good < int64(len(data)) {
		if err := l.f.Truncate(good); err != nil {
			return nil, fmt.Errorf("cut torn tail of payments file %s: %w", path, err)
		}
		if err := l.f.Sync(); err != nil {
			return nil, fmt.Errorf("sync payments file %s: %w", path, err)
		}
	}
	l.size = good
	return recs, nil
}

// append writes p as one line and fsyncs before returning, so the caller may
// answer the request only once this returns nil.
func (l *recordFile) append(p Payment) error {
	if l.broken != nil {
		return l.broken
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode payment %s: %w", p.ID, err)
	}
	b = append(b, '\n')
	if _, err := l.f.Write(b); err != nil {
		// Cut a partial line so it cannot sit between good records; a later
		// open would otherwise refuse the file as corrupt.
		if terr := l.f.Truncate(l.size); terr != nil {
			err = errors.Join(err, terr)
		}
		l.broken = fmt.Errorf("payments file unusable after failed write (restart to recover): %w", err)
		return l.broken
	}
	if err := l.f.Sync(); err != nil {
		l.broken = fmt.Errorf("payments file unusable after failed fsync (restart to recover): %w", err)
		return l.broken
	}
	l.size += int64(len(b))
	return nil
}

func (l *recordFile) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f, l.broken = nil, ErrClosed
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
