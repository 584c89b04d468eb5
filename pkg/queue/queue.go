// Package queue holds the JetStream layout durable runs on: stream and
// consumer settings, subjects, message ids and the step message format.
// Workers, the scheduler, the approver and the CLI all go through it so the
// wire format is defined once.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
)

const (
	// StepStream holds step messages on durable.step.<workflow>.<run>.
	StepStream = "DURABLE_STEPS"
	// DLQStream holds dead letters on durable.dlq.<workflow>.<run>.
	DLQStream = "DURABLE_DLQ"
	// EventStream holds run events (reminders, status changes) on
	// durable.events.<workflow>.<kind>.
	EventStream = "DURABLE_EVENTS"

	stepPrefix  = "durable.step."
	dlqPrefix   = "durable.dlq."
	eventPrefix = "durable.events."
)

// EventSubject is the subject of a run event of a workflow.
func EventSubject(workflow, kind string) string { return eventPrefix + workflow + "." + kind }

// ErrBadID: a run id or workflow name can't be a subject token.
var ErrBadID = errors.New("invalid id")

// ValidateRunID checks that id can be a NATS subject token and a store key:
// 1-128 letters, digits, '-' or '_'.
func ValidateRunID(id string) error {
	if !checkpoint.ValidID(id) {
		return fmt.Errorf("run id %q: %w: use 1-128 letters, digits, '-' or '_' (it becomes a NATS subject token)", id, ErrBadID)
	}
	return nil
}

// StepSubject is the subject of every step message of a run.
func StepSubject(workflow, run string) string { return stepPrefix + workflow + "." + run }

// StepFilter matches the step messages of one workflow (or all with "*").
func StepFilter(workflow string) string { return stepPrefix + workflow + ".*" }

// DLQSubject is the dead-letter subject of a run.
func DLQSubject(workflow, run string) string { return dlqPrefix + workflow + "." + run }

// StepMsg is the body of a step message. The checkpoint store, not the
// message, is the truth: a message only says "look at step n of run R",
// or "look at branch i of the fan-out whose join is step n".
type StepMsg struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	// Step is the step to run; 0 in a branch's message, so that a worker
	// that does not know branches refuses it as malformed instead of
	// taking it for the join.
	Step int `json:"step"`
	// BranchOf is the join step of the fan-out a branch belongs to.
	BranchOf int `json:"branch_of,omitempty"`
	// Branch is the branch's index in its fan-out, from 1.
	Branch int `json:"branch,omitempty"`
	// Name is informational (the step name when published).
	Name string `json:"name,omitempty"`
}

// BranchStep returns the message of branch i of the fan-out whose join is
// step n of run.
func BranchStep(run checkpoint.Run, n, i int, name string) StepMsg {
	return StepMsg{RunID: run.ID, Workflow: run.Workflow, BranchOf: n, Branch: i, Name: name}
}

// At is the step the message is about: Step, or the join step of a branch.
func (m StepMsg) At() int {
	if m.Branch > 0 {
		return m.BranchOf
	}
	return m.Step
}

// Label names the step ("5") or the branch ("5.3") in logs and errors.
func (m StepMsg) Label() string {
	if m.Branch > 0 {
		return strconv.Itoa(m.BranchOf) + "." + strconv.Itoa(m.Branch)
	}
	return strconv.Itoa(m.Step)
}

// ErrMalformed: a step message that can't be decoded or names nothing valid.
var ErrMalformed = errors.New("malformed step message")

// DecodeStep decodes and validates a step message received on subject.
func DecodeStep(subject string, data []byte) (StepMsg, error) {
	var m StepMsg
	// Every delivery decodes its message: the v2 engine's v1 semantics
	// (github.com/go-json-experiment/json/v1) are twice as fast, and a
	// message they refuse is decoded again by encoding/json, whose error
	// the on-call reads in the log.
	if jsonv1.Unmarshal(data, &m) != nil {
		m = StepMsg{}
		if err := json.Unmarshal(data, &m); err != nil {
			return m, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	if err := ValidateRunID(m.RunID); err != nil {
		return m, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !checkpoint.ValidID(m.Workflow) {
		return m, fmt.Errorf("%w: workflow %q", ErrMalformed, m.Workflow)
	}
	switch {
	case m.Branch == 0 && m.BranchOf == 0:
		if m.Step < 1 {
			return m, fmt.Errorf("%w: step %d", ErrMalformed, m.Step)
		}
	case m.Step != 0 || m.BranchOf < 2 || m.Branch < 1 || m.Branch > checkpoint.MaxBranches:
		return m, fmt.Errorf("%w: branch %d of the fan-out joined at step %d (step %d): a branch message has step 0, branch_of at least 2 and branch 1-%d", ErrMalformed, m.Branch, m.BranchOf, m.Step, checkpoint.MaxBranches)
	}
	if subject != "" && subject != StepSubject(m.Workflow, m.RunID) {
		return m, fmt.Errorf("%w: body names %s/%s but subject is %s", ErrMalformed, m.Workflow, m.RunID, subject)
	}
	return m, nil
}

// Config sets the streams' storage. Zero values are the defaults.
type Config struct {
	// Replicas of each stream. Default 1; use 3 on a cluster.
	Replicas int
	// MaxAge of step messages, kept for replay with the nats CLI. Default 7 days.
	MaxAge time.Duration
	// Duplicates is the Nats-Msg-Id dedupe window. Default 2 minutes.
	Duplicates time.Duration
}

// StepStreamConfig is the step stream's configuration. Limits retention
// (not WorkQueue) so the on-call can replay messages with the nats CLI;
// the shared durable consumer still gives each message to one worker.
func StepStreamConfig(c Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StepStream,
		Description: "durable step messages: durable.step.<workflow>.<run>",
		Subjects:    []string{stepPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(c.Replicas, 1),
		MaxAge:      orDefault(c.MaxAge, 7*24*time.Hour),
		Duplicates:  orDefault(c.Duplicates, 2*time.Minute),
		Discard:     jetstream.DiscardOld,
	}
}

// DLQStreamConfig is the dead-letter stream's configuration.
func DLQStreamConfig(c Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        DLQStream,
		Description: "durable dead letters: durable.dlq.<workflow>.<run>",
		Subjects:    []string{dlqPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(c.Replicas, 1),
		MaxAge:      orDefault(c.MaxAge*4, 30*24*time.Hour),
		Duplicates:  orDefault(c.Duplicates, 2*time.Minute),
	}
}

// EventStreamConfig is the run events stream's configuration.
func EventStreamConfig(c Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventStream,
		Description: "durable run events: durable.events.<workflow>.<kind>",
		Subjects:    []string{eventPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(c.Replicas, 1),
		MaxAge:      orDefault(c.MaxAge, 7*24*time.Hour),
		Duplicates:  orDefault(c.Duplicates, 2*time.Minute),
	}
}

// PublishEvent publishes a run event, deduplicated by id.
func PublishEvent(ctx context.Context, js jetstream.JetStream, workflow, kind, id string, body any) error {
	msg, err := EventMessage(workflow, kind, id, body)
	if err != nil {
		return err
	}
	if p := PublishAll(ctx, js, msg)[0]; p.Err != nil {
		return fmt.Errorf("publish %s event %s: %w", kind, id, p.Err)
	}
	return nil
}

// StatusEvent is published on durable.events.<workflow>.<status> whenever a
// run's status changes (started, parked, resumed, completed, failed,
// cancelled, dead-lettered, redriven), after the change is stored, so that
// other systems can react without polling. One run's events are published
// in the order of its changes (the one that resumes a run goes before the
// resumed step's message) and Rev orders them; they are deduplicated by run
// and revision. The run record stays the truth: an event lost with a crash
// between the store write and the publish is not sent again.
type StatusEvent struct {
	RunID    string    `json:"run_id"`
	Workflow string    `json:"workflow"`
	Status   string    `json:"status"`
	Step     int       `json:"step"`
	StepName string    `json:"step_name,omitempty"`
	Error    string    `json:"error,omitempty"`
	Rev      uint64    `json:"rev"`
	At       time.Time `json:"at"`
}

// PublishStatus publishes the status of run as stored at its revision.
func PublishStatus(ctx context.Context, js jetstream.JetStream, run checkpoint.Run) error {
	msg, err := StatusMessage(run)
	if err != nil {
		return err
	}
	if p := PublishAll(ctx, js, msg)[0]; p.Err != nil {
		return fmt.Errorf("publish %s event %s: %w", run.Status, statusID(run), p.Err)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Provision creates the streams when they are missing. Existing streams
// are left as they are: an operator may have tuned them (R3, retention),
// and a worker starting must not undo that. Idempotent.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	for _, sc := range []jetstream.StreamConfig{StepStreamConfig(c), DLQStreamConfig(c), EventStreamConfig(c)} {
		_, err := js.Stream(ctx, sc.Name)
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("look up stream %s: %w", sc.Name, err)
		}
		_, err = js.CreateStream(ctx, sc)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// EnsureConsumer binds the shared consumer cc.Durable, creating it when it
// is missing. An existing consumer's settings are kept.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, StepStream, cc.Durable)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("look up consumer %s: %w", cc.Durable, err)
	}
	c, err = js.CreateConsumer(ctx, StepStream, cc)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return js.Consumer(ctx, StepStream, cc.Durable)
	}
	if err != nil {
		return nil, fmt.Errorf("create consumer %s: %w", cc.Durable, err)
	}
	return c, nil
}

// ConsumerName is the shared durable consumer of a workflow's step messages.
func ConsumerName(workflow string) string { return "steps-" + workflow }

// ConsumerConfig is the shared durable consumer of one workflow: every
// worker that runs the workflow pulls from it, each message goes to one.
func ConsumerConfig(workflow string, ackWait time.Duration, maxAckPending int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(workflow),
		Description:   "durable workers of workflow " + workflow,
		FilterSubject: StepFilter(workflow),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		// DeliverAll: a step published before the first worker created the
		// consumer must still run. Replayed history is harmless by the protocol.
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// Retries are counted by the worker against the step's policy; the
		// server's count is reported on each delivery.
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
	}
}

// PublishStep publishes step message m with the given Nats-Msg-Id, waits
// for the PubAck and says whether the stream took the message as new:
// false when a message of that id was published within the stream's
// duplicate window and this one was dropped.
func PublishStep(ctx context.Context, js jetstream.JetStream, m StepMsg, msgID string) (bool, error) {
	msg, err := StepMessage(m, msgID)
	if err != nil {
		return false, err
	}
	InjectTrace(ctx, msg)
	p := PublishAll(ctx, js, msg)[0]
	if p.Err != nil {
		return false, fmt.Errorf("publish step %s:%s: %w", m.RunID, m.Label(), p.Err)
	}
	return !p.Ack.Duplicate, nil
}

// PublishSteps publishes step messages ms, ms[k] under ids[k], at once
// (async publish), and waits for every PubAck. It says how many the stream
// took as new. On an error some may have been published: publishing them
// again is deduplicated by id.
func PublishSteps(ctx context.Context, js jetstream.JetStream, ms []StepMsg, ids []string) (int, error) {
	msgs := make([]*nats.Msg, len(ms))
	for k, m := range ms {
		var err error
		if msgs[k], err = StepMessage(m, ids[k]); err != nil {
			return 0, err
		}
		InjectTrace(ctx, msgs[k])
	}
	fresh := 0
	var errs []error
	for k, p := range PublishAll(ctx, js, msgs...) {
		switch {
		case p.Err != nil:
			errs = append(errs, fmt.Errorf("publish step %s:%s: %w", ms[k].RunID, ms[k].Label(), p.Err))
		case !p.Ack.Duplicate:
			fresh++
		}
	}
	return fresh, errors.Join(errs...)
}

// DeadLetter is the body of a dead-letter message.
type DeadLetter struct {
	RunID    string    `json:"run_id"`
	Workflow string    `json:"workflow"`
	Step     int       `json:"step"`
	StepName string    `json:"step_name,omitempty"`
	Reason   string    `json:"reason"`
	Attempt  int       `json:"attempt"`
	At       time.Time `json:"at"`
}

// PublishDeadLetter publishes d on the dead-letter stream of run (as it is
// dead), deduplicated per run, step and generation (a redriven run that
// dies again is a new letter).
func PublishDeadLetter(ctx context.Context, js jetstream.JetStream, run checkpoint.Run, d DeadLetter) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: DLQSubject(d.Workflow, d.RunID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, deadLetterMsgID(run, d.Step))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish dead letter %s:%d: %w", d.RunID, d.Step, err)
	}
	return nil
}

// PublishFanOut publishes what the fan-out committed at checkpoint fan
// waits for, run being at its join (step fan.Step+1): the messages of the
// branches that have no checkpoint among done, or the join's message when
// every branch has one. suffix follows the regular message ids: "" for
// the publish after the fan-out's commit, the join's publish by its last
// branch and their replays (deduplicated), a redrive's own
// (Cause.Suffix) or a repair's (RepairSuffix) otherwise. It says how many
// messages the stream took as new.
func PublishFanOut(ctx context.Context, js jetstream.JetStream, run checkpoint.Run, fan checkpoint.Checkpoint, done []checkpoint.Checkpoint, suffix string) (int, error) {
	join := fan.Step + 1
	have := make(map[int]bool, len(done))
	for _, cp := range done {
		have[cp.Branch] = true
	}
	var ms []StepMsg
	var ids []string
	for k, b := range fan.FanOut.Branches {
		if !have[k+1] {
			ms = append(ms, BranchStep(run, join, k+1, b.Step))
			ids = append(ids, BranchMsgID(run.ID, join, k+1)+suffix)
		}
	}
	if len(ms) == 0 {
		ms = []StepMsg{{RunID: run.ID, Workflow: run.Workflow, Step: join, Name: fan.Next}}
		ids = []string{JoinMsgID(run, join) + suffix}
	}
	return PublishSteps(ctx, js, ms, ids)
}
