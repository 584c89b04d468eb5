package queue

import (
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Message ids (Nats-Msg-Id) are minted here and nowhere else. The stream
// drops a message whose id it saw within its duplicate window, which is
// what makes a replay of the same publish harmless; an id that names a
// different publish must therefore never repeat one. Every id that can
// recur at the same step (a resume, a wake, the children's resume, a
// redrive, the join) carries the run's generation, which grows with every
// resume and every redrive.

// MsgID is the Nats-Msg-Id of the regular publish of step n of run:
// "<run>:<n>". The cursor only grows, so it names one publish; a
// roll-forward's publish of the same step again is meant to be dropped.
func MsgID(run string, n int) string { return run + ":" + strconv.Itoa(n) }

// BranchMsgID is the Nats-Msg-Id of the regular publish of branch i of
// the fan-out whose join is step n: "<run>:<n>.<i>".
func BranchMsgID(run string, n, i int) string { return MsgID(run, n) + "." + strconv.Itoa(i) }

// JoinMsgID is the Nats-Msg-Id of the join's publish by the branch that
// found every branch of its fan-out committed: "<run>:<n>:join<gen>". It
// is not MsgID(run, n): a message for step n published early under that
// id would make the stream drop the join as a duplicate; and it carries
// the generation, so the join a branch redriven after a dead join
// publishes is not dropped as the first join's duplicate.
func JoinMsgID(run checkpoint.Run, n int) string { return MsgID(run.ID, n) + ":join" + gen(run) }

// Generation is the part of a run's state that message ids carry: it
// grows with every resume (a decision, a signal, an expiry) and every
// redrive, and never goes back.
func Generation(run checkpoint.Run) int { return run.Resumes + run.Redrives }

func gen(run checkpoint.Run) string { return strconv.Itoa(Generation(run)) }

// Cause says why a step is published other than by its regular publish.
type Cause string

// The causes of a publish.
const (
	Regular  Cause = ""         // the step's own publish (MsgID, BranchMsgID, JoinMsgID)
	Resume   Cause = "resume"   // a decision, or an approval's expiry
	Signal   Cause = "signal"   // a signal, or a signal wait's expiry
	Wake     Cause = "wake"     // a durable timer fired
	Children Cause = "children" // the last child run ended
	Redrive  Cause = "redrive"  // an operator redrove the dead run
)

// Suffix is what cause adds to the regular id of a step (or branch, or
// join) of run, as run is stored after the change that caused it.
func (c Cause) Suffix(run checkpoint.Run) string {
	if c == Regular {
		return ""
	}
	return ":" + string(c) + gen(run)
}

// ResumeMsgID is the Nats-Msg-Id of the publish, for cause, of the step
// at run's cursor as run is stored after the change that caused it:
// "<run>:<n>:<cause><gen>". A publish again of the same change (a
// republish after a failed publish, a second scheduler) has the same id
// and is dropped; a later change of the same cause has a later
// generation, or a later step.
func ResumeMsgID(run checkpoint.Run, cause Cause) string {
	return MsgID(run.ID, run.Step) + cause.Suffix(run)
}

// RepairMsgID is the Nats-Msg-Id of a repair's publish of the step at
// run's cursor, or of a branch or join of the fan-out there (suffix of
// BranchMsgID or JoinMsgID), for the stuck state that was last changed at
// progress: one id per stuck state.
func RepairMsgID(run checkpoint.Run, progress time.Time) string {
	return MsgID(run.ID, run.Step) + RepairSuffix(run, progress)
}

// RepairSuffix is what a repair for the stuck state last changed at
// progress adds to the regular ids.
func RepairSuffix(run checkpoint.Run, progress time.Time) string {
	return ":repair" + gen(run) + "." + strconv.FormatInt(progress.UnixMilli(), 10)
}

// deadLetterMsgID is the Nats-Msg-Id of run's dead letter for step n: a
// redriven run that dies again is a new letter.
func deadLetterMsgID(run checkpoint.Run, n int) string {
	return MsgID(run.ID, n) + ":dead:" + strconv.Itoa(run.Resumes) + "." + strconv.Itoa(run.Redrives)
}

// ReminderMsgID is the Nats-Msg-Id of the reminder event for the approval
// that step n of run waits for, with left reminders after it.
func ReminderMsgID(run checkpoint.Run, n, left int) string {
	return MsgID(run.ID, n) + ":remind" + gen(run) + ":" + strconv.Itoa(left)
}

// RenewMsgID is the Nats-Msg-Id of a fresh copy of the step message of
// id id, stored at stream sequence seq, that a worker publishes in place
// of it (a step handed back many times for its rate limit: the copy
// starts its deliveries from 1): "<original id>:renew.<seq>", one per
// message stored; a copy's copy is named after the original id, so ids
// do not grow with renewals.
func RenewMsgID(id string, seq uint64) string {
	base, _, _ := strings.Cut(id, renewSep)
	return base + renewSep + strconv.FormatUint(seq, 10)
}

const renewSep = ":renew."
