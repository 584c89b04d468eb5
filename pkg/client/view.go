package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// RunView is a run with its history, as `durable runs show --json` prints it.
type RunView struct {
	RunID       string                `json:"run_id"`
	Workflow    string                `json:"workflow"`
	Version     int                   `json:"version"`
	Status      checkpoint.Status     `json:"status"`
	Step        int                   `json:"step"`
	StepName    string                `json:"step_name"`
	Input       json.RawMessage       `json:"input,omitempty"`
	StartedBy   string                `json:"started_by,omitempty"`
	CreatedAt   time.Time             `json:"created_at"`
	UpdatedAt   time.Time             `json:"updated_at"`
	Error       string                `json:"error,omitempty"`
	Resumes     int                   `json:"resumes"`
	Wait        *checkpoint.Wait      `json:"wait,omitempty"`
	Checkpoints []CheckpointView      `json:"checkpoints"`
	Approvals   []checkpoint.Approval `json:"approvals"`
	Effects     []EffectView          `json:"effects"`
	State       json.RawMessage       `json:"state,omitempty"`
}

// CheckpointView summarises one checkpoint.
type CheckpointView struct {
	Step       int               `json:"step"`
	Name       string            `json:"name"`
	Bytes      int               `json:"bytes"`
	At         time.Time         `json:"at"`
	Attempt    int               `json:"attempt"`
	Next       string            `json:"next,omitempty"`
	Status     checkpoint.Status `json:"status"`
	DurationMS float64           `json:"duration_ms"`
	Calls      int               `json:"calls"`
	Replayed   int               `json:"replayed_calls"`
}

// EffectView is an effect with the step that performed it.
type EffectView struct {
	Key      string `json:"key"`
	Replayed bool   `json:"replayed"`
	Step     int    `json:"step"`
}

// RunSummary is one line of `durable runs list --json`.
type RunSummary struct {
	RunID     string            `json:"run_id"`
	Workflow  string            `json:"workflow"`
	Status    checkpoint.Status `json:"status"`
	Step      int               `json:"step"`
	StepName  string            `json:"step_name"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	Error     string            `json:"error,omitempty"`
}

// Summarize turns runs into list lines.
func Summarize(runs []checkpoint.Run) []RunSummary {
	out := make([]RunSummary, 0, len(runs))
	for _, r := range runs {
		out = append(out, RunSummary{RunID: r.ID, Workflow: r.Workflow, Status: r.Status, Step: r.Step, StepName: r.StepName, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Error: r.Error})
	}
	return out
}

// Inspect reads a run with its checkpoints, approvals and effects.
func (c *Client) Inspect(ctx context.Context, id string) (RunView, error) {
	run, err := c.store.GetRun(ctx, id)
	if err != nil {
		return RunView{}, fmt.Errorf("run %s: %w", id, err)
	}
	cps, err := c.store.Checkpoints(ctx, id)
	if err != nil {
		return RunView{}, fmt.Errorf("checkpoints of %s: %w", id, err)
	}
	v := RunView{
		RunID: run.ID, Workflow: run.Workflow, Version: run.Version, Status: run.Status,
		Step: run.Step, StepName: run.StepName, Input: run.Input, StartedBy: run.StartedBy,
		CreatedAt: run.CreatedAt, UpdatedAt: run.UpdatedAt, Error: run.Error, Resumes: run.Resumes,
		Wait: run.Wait, Checkpoints: []CheckpointView{}, Approvals: run.Approvals, Effects: []EffectView{},
	}
	if v.Approvals == nil {
		v.Approvals = []checkpoint.Approval{}
	}
	for _, cp := range cps {
		b, _ := json.Marshal(cp)
		cv := CheckpointView{Step: cp.Step, Name: cp.Name, Bytes: len(b), At: cp.At, Attempt: cp.Attempt, Next: cp.Next, Status: cp.Status, DurationMS: cp.DurationMS, Calls: len(cp.Journal)}
		for _, call := range cp.Journal {
			if call.Replayed {
				cv.Replayed++
			}
		}
		v.Checkpoints = append(v.Checkpoints, cv)
		for _, e := range cp.Effects {
			v.Effects = append(v.Effects, EffectView{Key: e.Key, Replayed: e.Replayed, Step: cp.Step})
		}
		v.State = cp.State
	}
	return v, nil
}
