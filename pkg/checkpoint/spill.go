package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// The run record has a bound (issue 23 item 6). Every write of a run
// passes through a store's UpdateRun or Commit, and each store spills the
// record there (Run.Spill) before it stores it: what leaves the record is
// kept in keys of its own, append-only, which History reads back.
const (
	// AuditKept is how many audit entries, the newest, stay on the record;
	// older ones move to the run's audit log (Run.AuditArchived counts them).
	AuditKept = 100
	// ApprovalsKept is how many decisions on steps before the cursor, the
	// newest, stay on the record; older ones move to the run's approval
	// log (Run.ApprovalsArchived). Decisions on the step at the cursor
	// always stay: the step reads them (steps.Context.ApprovalOf).
	ApprovalsKept = 20
	// InlineBytes is the largest approval payload, and the longest reason
	// of a decision or an audit entry, kept inline; a larger one is stored
	// once under its SHA-256 and the record keeps the hash.
	InlineBytes = 512
	// MaxRunRecordBytes bounds the encoded run record with its input, the
	// current wait's payload, the pending signals' data (at most 256 KiB,
	// client.MaxSignalBytesPerRun) and the decisions on the step at the
	// cursor left out: AuditKept entries and ApprovalsKept decisions of at
	// most about 1.2 KiB each, MaxConsumedSignals consumed and 100 pending
	// signals, an error of up to 2 KiB and the fixed fields, with ids,
	// names, groups and identities of at most 128 bytes (the worst case,
	// TestSpillWorstCase, is 288,004 bytes). On JetStream KV, whose values
	// stop at NATS's 1 MB payload, that leaves about 440 KiB for the
	// input and the wait's payload together.
	MaxRunRecordBytes = 320 << 10
)

// Spilled is what Run.Spill moved off a record: entries of the run's
// append-only logs, each under its sequence (its index among every entry
// the run ever recorded), and blobs under their SHA-256. Writing them again
// is harmless: a sequence names one entry for ever, a hash one content.
type Spilled struct {
	// Audit holds entries AuditFrom, AuditFrom+1, ... of the audit log.
	Audit     []AuditEntry
	AuditFrom int
	// Approvals holds decisions ApprovalsFrom, ApprovalsFrom+1, ...
	Approvals     []Approval
	ApprovalsFrom int
	// Blobs maps the hex SHA-256 of each payload or reason moved out to it.
	Blobs map[string][]byte
}

// Empty reports whether nothing was moved.
func (s Spilled) Empty() bool { return len(s.Audit) == 0 && len(s.Approvals) == 0 && len(s.Blobs) == 0 }

// Spill moves off r what its bound leaves out: audit entries beyond the
// newest AuditKept, decisions on steps before the cursor beyond the newest
// ApprovalsKept, and payloads and reasons over InlineBytes (by hash). It
// never writes into the slices r was read with, and is idempotent: a
// spilled record spills nothing more until it grows again.
//
// A log entry moves only once AuditKept (or ApprovalsKept) newer ones
// follow it; every writer appends a few entries per write, so what moves
// was on the stored record the writer read, and a writer whose
// compare-and-set loses wrote only what the winner writes too.
func (r *Run) Spill() Spilled {
	var sp Spilled
	blob := func(b []byte) string {
		sum := SHA256Hex(b)
		if sp.Blobs == nil {
			sp.Blobs = map[string][]byte{}
		}
		sp.Blobs[sum] = b
		return sum
	}
	audit := r.Audit
	copied := false
	for i, e := range audit {
		if len(e.Reason) > InlineBytes {
			if !copied {
				audit, copied = append([]AuditEntry(nil), audit...), true
			}
			audit[i].ReasonBlob, audit[i].Reason = blob([]byte(e.Reason)), ""
		}
	}
	if n := len(audit) - AuditKept; n > 0 {
		sp.Audit, sp.AuditFrom = audit[:n:n], r.AuditArchived
		audit = append([]AuditEntry(nil), audit[n:]...)
		r.AuditArchived += n
	}
	r.Audit = audit

	approvals := r.Approvals
	copied = false
	for i, a := range approvals {
		big, long := len(a.Payload) > InlineBytes, len(a.Reason) > InlineBytes
		if a.Step >= r.Step || (!big && !long) {
			// The step at the cursor reads its decisions whole (the
			// reason of a rejection, the payload approved): they stay.
			continue
		}
		if !copied {
			approvals, copied = append([]Approval(nil), approvals...), true
		}
		if big {
			approvals[i].PayloadBlob, approvals[i].Payload = blob(a.Payload), nil
		}
		if long {
			approvals[i].ReasonBlob, approvals[i].Reason = blob([]byte(a.Reason)), ""
		}
	}
	before := 0 // the prefix of decisions on steps before the cursor
	for before < len(approvals) && approvals[before].Step < r.Step {
		before++
	}
	if n := min(before, len(approvals)-ApprovalsKept); n > 0 {
		sp.Approvals, sp.ApprovalsFrom = approvals[:n:n], r.ApprovalsArchived
		approvals = append([]Approval(nil), approvals[n:]...)
		r.ApprovalsArchived += n
	}
	r.Approvals = approvals
	return sp
}

// SHA256Hex is the hex SHA-256 of b, the name of a spilled blob.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// History is implemented by a store that spills run records (both stores
// of this module): it reads back what Run.Spill moved off a record.
type History interface {
	// AuditLog returns the audit entries moved off run id's record, by
	// sequence from 0; entries it lacks are left out.
	AuditLog(ctx context.Context, id string) ([]AuditEntry, error)
	// ApprovalLog returns the decisions moved off run id's record, by
	// sequence from 0.
	ApprovalLog(ctx context.Context, id string) ([]Approval, error)
	// Blob returns the payload or reason stored under its hex SHA-256 for
	// run id, or ErrNotFound.
	Blob(ctx context.Context, id, sha string) ([]byte, error)
}

// Restore returns run as it would be had nothing been spilled: the whole
// audit trail and every decision, with their payloads and reasons. A run
// that spilled nothing is returned as it is.
func Restore(ctx context.Context, h History, run Run) (Run, error) {
	if run.AuditArchived > 0 {
		old, err := h.AuditLog(ctx, run.ID)
		if err != nil {
			return Run{}, fmt.Errorf("audit log of %s: %w", run.ID, err)
		}
		run.Audit = append(old, run.Audit...)
	}
	if run.ApprovalsArchived > 0 {
		old, err := h.ApprovalLog(ctx, run.ID)
		if err != nil {
			return Run{}, fmt.Errorf("approval log of %s: %w", run.ID, err)
		}
		run.Approvals = append(old, run.Approvals...)
	} else {
		run.Approvals = append([]Approval(nil), run.Approvals...)
	}
	if len(run.Audit) > 0 && run.AuditArchived == 0 {
		run.Audit = append([]AuditEntry(nil), run.Audit...)
	}
	blob := func(sha string) ([]byte, error) {
		b, err := h.Blob(ctx, run.ID, sha)
		if err != nil {
			return nil, fmt.Errorf("blob %s of %s: %w", sha, run.ID, err)
		}
		return b, nil
	}
	for i := range run.Audit {
		if e := &run.Audit[i]; e.ReasonBlob != "" {
			b, err := blob(e.ReasonBlob)
			if err != nil {
				return Run{}, err
			}
			e.Reason, e.ReasonBlob = string(b), ""
		}
	}
	for i := range run.Approvals {
		a := &run.Approvals[i]
		if a.PayloadBlob != "" {
			b, err := blob(a.PayloadBlob)
			if err != nil {
				return Run{}, err
			}
			a.Payload, a.PayloadBlob = json.RawMessage(b), ""
		}
		if a.ReasonBlob != "" {
			b, err := blob(a.ReasonBlob)
			if err != nil {
				return Run{}, err
			}
			a.Reason, a.ReasonBlob = string(b), ""
		}
	}
	return run, nil
}
