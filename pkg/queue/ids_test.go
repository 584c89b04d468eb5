package queue_test

import (
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// The same change of a run mints the same id (a republish is dropped);
// a resume, a redrive, another cause or another step mints another.
func TestMessageIDsCarryTheGeneration(t *testing.T) {
	run := checkpoint.Run{ID: "r-1", Step: 3}
	resumed := run
	resumed.Resumes++
	redriven := run
	redriven.Redrives++
	at := time.UnixMilli(1_700_000_000_000)
	ids := map[string]string{}
	for name, id := range map[string]string{
		"children":             queue.ResumeMsgID(run, queue.Children),
		"children redriven":    queue.ResumeMsgID(redriven, queue.Children),
		"wake":                 queue.ResumeMsgID(run, queue.Wake),
		"wake resumed":         queue.ResumeMsgID(resumed, queue.Wake),
		"resume":               queue.ResumeMsgID(resumed, queue.Resume),
		"signal":               queue.ResumeMsgID(resumed, queue.Signal),
		"redrive":              queue.ResumeMsgID(redriven, queue.Redrive),
		"join":                 queue.JoinMsgID(run, 3),
		"join redriven":        queue.JoinMsgID(redriven, 3),
		"repair":               queue.RepairMsgID(run, at),
		"repair redriven":      queue.RepairMsgID(redriven, at),
		"repair later":         queue.RepairMsgID(run, at.Add(time.Millisecond)),
		"regular":              queue.MsgID(run.ID, run.Step),
		"regular next":         queue.MsgID(run.ID, run.Step+1),
		"branch":               queue.BranchMsgID(run.ID, 3, 1),
		"branch redrive":       queue.BranchMsgID(run.ID, 3, 1) + queue.Redrive.Suffix(redriven),
		"reminder":             queue.ReminderMsgID(run, 3, 1),
		"reminder resumed":     queue.ReminderMsgID(resumed, 3, 1),
		"reminder one fewer":   queue.ReminderMsgID(run, 3, 0),
		"children next step":   queue.ResumeMsgID(checkpoint.Run{ID: "r-1", Step: 4}, queue.Children),
		"children other run":   queue.ResumeMsgID(checkpoint.Run{ID: "r-2", Step: 3}, queue.Children),
		"wake resumed+redrive": queue.ResumeMsgID(checkpoint.Run{ID: "r-1", Step: 3, Resumes: 1, Redrives: 1}, queue.Wake),
	} {
		if other, ok := ids[id]; ok {
			t.Errorf("%s and %s both mint %s", name, other, id)
		}
		ids[id] = name
	}
	if a, b := queue.ResumeMsgID(resumed, queue.Signal), queue.ResumeMsgID(resumed, queue.Signal); a != b {
		t.Errorf("the same change minted %s and %s", a, b)
	}
}

// A copy of a copy is named after the original id, not after the copy:
// ids do not grow with every renewal.
func TestRenewMsgIDDoesNotChain(t *testing.T) {
	first := queue.RenewMsgID("r1:3", 17)
	if first != "r1:3:renew.17" {
		t.Fatalf("RenewMsgID(r1:3, 17) = %q", first)
	}
	if again := queue.RenewMsgID(first, 40); again != "r1:3:renew.40" {
		t.Fatalf("the renewal of %s is %q, want r1:3:renew.40", first, again)
	}
}
