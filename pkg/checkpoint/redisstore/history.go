package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/redis/go-redis/v9"
)

var _ checkpoint.History = (*Store)(nil)

// spillKeys are the keys a write script stores a spill in, in the order
// spillLua takes them: the audit log, the approval log, the blobs.
func (s *Store) spillKeys(id string) []string {
	return []string{s.auditKey(id), s.approvalsKey(id), s.blobsKey(id)}
}

// spillArgs spills run (checkpoint.Run.Spill) and returns what moved as
// the arguments spillLua reads: for the audit log, the approval log and
// the blobs, a count and that many field/value pairs. The script stores
// them in the same step as the record, so they land exactly when it does.
func spillArgs(run *checkpoint.Run) ([]any, error) {
	sp := run.Spill()
	args := make([]any, 0, 3+2*(len(sp.Audit)+len(sp.Approvals)+len(sp.Blobs)))
	args = append(args, len(sp.Audit))
	for i, e := range sp.Audit {
		doc, err := marshal(e)
		if err != nil {
			return nil, err
		}
		args = append(args, sp.AuditFrom+i, doc)
	}
	args = append(args, len(sp.Approvals))
	for i, a := range sp.Approvals {
		doc, err := marshal(a)
		if err != nil {
			return nil, err
		}
		args = append(args, sp.ApprovalsFrom+i, doc)
	}
	args = append(args, len(sp.Blobs))
	for sha, b := range sp.Blobs {
		args = append(args, sha, b)
	}
	return args, nil
}

// AuditLog returns the audit entries moved off run id's record, by sequence.
func (s *Store) AuditLog(ctx context.Context, id string) ([]checkpoint.AuditEntry, error) {
	var out []checkpoint.AuditEntry
	if err := readLog(ctx, s, s.auditKey(id), id, &out); err != nil {
		return nil, fmt.Errorf("audit log of %s: %w", id, err)
	}
	return out, nil
}

// ApprovalLog returns the decisions moved off run id's record, by sequence.
func (s *Store) ApprovalLog(ctx context.Context, id string) ([]checkpoint.Approval, error) {
	var out []checkpoint.Approval
	if err := readLog(ctx, s, s.approvalsKey(id), id, &out); err != nil {
		return nil, fmt.Errorf("approval log of %s: %w", id, err)
	}
	return out, nil
}

// readLog decodes the hash key, sequence -> JSON, into out in sequence order.
func readLog[T any](ctx context.Context, s *Store, key, id string, out *[]T) error {
	if err := readID(id); err != nil {
		return err
	}
	m, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return err
	}
	seqs := make([]int, 0, len(m))
	for k := range m {
		n, err := strconv.Atoi(k)
		if err != nil {
			return fmt.Errorf("log field %q: %w", k, err)
		}
		seqs = append(seqs, n)
	}
	sort.Ints(seqs)
	*out = make([]T, len(seqs))
	for i, n := range seqs {
		if err := unmarshal(m[strconv.Itoa(n)], &(*out)[i]); err != nil {
			return fmt.Errorf("log entry %d: %w", n, err)
		}
	}
	return nil
}

// Blob returns the payload or reason stored for run id under sha.
func (s *Store) Blob(ctx context.Context, id, sha string) ([]byte, error) {
	if err := readID(id); err != nil {
		return nil, fmt.Errorf("blob %s: %w", sha, err)
	}
	b, err := s.rdb.HGet(ctx, s.blobsKey(id), sha).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("blob %s of %s: %w", sha, id, checkpoint.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s of %s: %w", sha, id, err)
	}
	return b, nil
}
