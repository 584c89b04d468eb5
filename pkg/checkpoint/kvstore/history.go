package kvstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

var _ checkpoint.History = (*Store)(nil)

// What a run's spill moves off its record lives under the run's own key,
// "run.<R>.<kind>.<name>": a writer that may write run.<R> (the
// scheduler's and the approver's NATS permissions, $KV.<bucket>.run.>)
// may write these, and ListRuns' "run.*" never matches them.
func auditKey(id string, seq int) string    { return runKey(id) + ".a." + strconv.Itoa(seq) }
func approvalKey(id string, seq int) string { return runKey(id) + ".p." + strconv.Itoa(seq) }
func blobKey(id, sha string) string         { return runKey(id) + ".b." + sha }
func historyFilter(id, kind string) string  { return runKey(id) + "." + kind + ".*" }
func sequenceOf(key string) (int, error) {
	return strconv.Atoi(key[strings.LastIndexByte(key, '.')+1:])
}
func spillWriters(n int) int { return min(n, 32) }

// spill spills run (checkpoint.Run.Spill) and stores what moved, before
// the caller's compare-and-set of the trimmed record: every key is named
// by its sequence or its content's hash, so writing it again is harmless,
// and a compare-and-set that then loses leaves only what the winner
// writes too (see Run.Spill). The first write of a long record from
// before the bound moves thousands of entries: they go in parallel.
func (s *Store) spill(ctx context.Context, run *checkpoint.Run) error {
	sp := run.Spill()
	if sp.Empty() {
		return nil
	}
	type kv struct {
		key string
		doc []byte
	}
	var puts []kv
	for i, e := range sp.Audit {
		doc, err := marshal(e)
		if err != nil {
			return err
		}
		puts = append(puts, kv{auditKey(run.ID, sp.AuditFrom+i), doc})
	}
	for i, a := range sp.Approvals {
		doc, err := marshal(a)
		if err != nil {
			return err
		}
		puts = append(puts, kv{approvalKey(run.ID, sp.ApprovalsFrom+i), doc})
	}
	for sha, b := range sp.Blobs {
		puts = append(puts, kv{blobKey(run.ID, sha), b})
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan kv)
	)
	for range spillWriters(len(puts)) {
		wg.Go(func() {
			for p := range next {
				if _, err := s.put(ctx, p.key, p.doc, anyRevision); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range puts {
		next <- p
	}
	close(next)
	wg.Wait()
	if first != nil {
		return fmt.Errorf("spill run record: %w", first)
	}
	return nil
}

// AuditLog returns the audit entries moved off run id's record, by sequence.
func (s *Store) AuditLog(ctx context.Context, id string) ([]checkpoint.AuditEntry, error) {
	out, err := readLog[checkpoint.AuditEntry](ctx, s, id, "a")
	if err != nil {
		return nil, fmt.Errorf("audit log of %s: %w", id, err)
	}
	return out, nil
}

// ApprovalLog returns the decisions moved off run id's record, by sequence.
func (s *Store) ApprovalLog(ctx context.Context, id string) ([]checkpoint.Approval, error) {
	out, err := readLog[checkpoint.Approval](ctx, s, id, "p")
	if err != nil {
		return nil, fmt.Errorf("approval log of %s: %w", id, err)
	}
	return out, nil
}

func readLog[T any](ctx context.Context, s *Store, id, kind string) ([]T, error) {
	if err := readID(id); err != nil {
		return nil, err
	}
	type entry struct {
		seq int
		v   T
	}
	var entries []entry
	err := s.scan(ctx, historyFilter(id, kind), func(e jetstream.KeyValueEntry) error {
		seq, err := sequenceOf(e.Key())
		if err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		var v T
		if err := unmarshal(e.Value(), &v); err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		entries = append(entries, entry{seq, v})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].seq < entries[j].seq })
	out := make([]T, len(entries))
	for i, e := range entries {
		out[i] = e.v
	}
	return out, nil
}

// Blob returns the payload or reason stored for run id under sha.
func (s *Store) Blob(ctx context.Context, id, sha string) ([]byte, error) {
	if err := readID(id); err != nil {
		return nil, fmt.Errorf("blob %s: %w", sha, err)
	}
	e, err := s.get(ctx, blobKey(id, sha))
	if err != nil {
		return nil, fmt.Errorf("blob %s of %s: %w", sha, id, err)
	}
	if !e.found {
		return nil, fmt.Errorf("blob %s of %s: %w", sha, id, checkpoint.ErrNotFound)
	}
	return e.value, nil
}
