package approver

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/durable-run/durable/internal/scheduleops"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
)

// The schedules API: what `durable schedule create|list|pause|resume|
// delete|trigger` gives an operator, over HTTP, for tokens of
// OperatorsGroup only (a schedule holds its runs' input, and a trigger
// starts a run). It goes through internal/scheduleops as the CLI does:
// the same validation, the same messages, one JSON shape of a schedule
// (schedule.View, the elements of `schedule list --json`).

// CodeExists: a schedule of that name exists.
const CodeExists = "exists"

// CodeTooMany: the store holds as many schedules as it keeps (its bound,
// schedule.StoreOptions.MaxSchedules, is in the message); delete one.
const CodeTooMany = "too_many"

// CodeNotStarted: a trigger's run could not be started (its fire is
// recorded as failed).
const CodeNotStarted = "not_started"

// Schedules is the body of GET /api/schedules: every schedule, by name.
type Schedules struct {
	Schedules []schedule.View `json:"schedules"`
}

// ScheduleCreated is the answer to POST /api/schedules: the schedule, and
// a warning when no worker has registered its workflow yet (it is kept:
// its fires are retried until one does, for the catch-up window).
type ScheduleCreated struct {
	schedule.View
	Warning string `json:"warning,omitempty"`
}

// schedulesOf answers 401 or 403 unless the caller is an operator, and
// 404 when this approver serves no schedules; else it returns the ops.
func (s *Server) schedulesOf(w http.ResponseWriter, r *http.Request) (scheduleops.Ops, tokens.Identity, bool) {
	who, ok := s.operator(w, r)
	if !ok {
		return scheduleops.Ops{}, who, false
	}
	if s.cfg.Schedules == nil {
		s.refuse(w, r, who.ID, "", http.StatusNotFound, CodeNotFound, "this approver serves no schedules (started without Config.Schedules); use `durable schedule`")
		return scheduleops.Ops{}, who, false
	}
	return scheduleops.Ops{Store: s.cfg.Schedules, Client: s.cfg.Client}, who, true
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) {
	ops, who, ok := s.schedulesOf(w, r)
	if !ok {
		return
	}
	all, err := ops.List(r.Context())
	if err != nil {
		s.internal(w, r, who.ID, "", err)
		return
	}
	writeJSON(w, http.StatusOK, Schedules{Schedules: all})
}

// handleSchedule is GET /api/schedules/{name}.
func (s *Server) handleSchedule(w http.ResponseWriter, r *http.Request) {
	ops, who, ok := s.schedulesOf(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	v, err := ops.Get(r.Context(), name)
	if err != nil {
		s.scheduleError(w, r, who, name, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// handleCreateSchedule is POST /api/schedules with a spec as body, as
// `schedule list --json` shows it under "spec".
func (s *Server) handleCreateSchedule(w http.ResponseWriter, r *http.Request) {
	ops, who, ok := s.schedulesOf(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody+schedule.MaxInputBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.refuse(w, r, who.ID, "", http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body over %d bytes", mbe.Limit))
			return
		}
		s.refuse(w, r, who.ID, "", http.StatusBadRequest, CodeBadRequest, "could not read the body: "+err.Error())
		return
	}
	spec, err := schedule.DecodeSpec(body)
	if err != nil {
		s.scheduleError(w, r, who, "", err)
		return
	}
	v, warning, err := ops.Create(r.Context(), spec, who.ID)
	if err != nil {
		s.scheduleError(w, r, who, spec.Name, err)
		return
	}
	ev := s.log.Info().Str("schedule", v.Spec.Name).Str("by", who.ID).Str("workflow", v.Spec.Workflow).Str("cron", v.Spec.Cron).Str("time_zone", v.Spec.TimeZone)
	ev.Msg("schedule created")
	writeJSON(w, http.StatusCreated, ScheduleCreated{View: v, Warning: warning})
}

// handleDeleteSchedule is DELETE /api/schedules/{name}.
func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	ops, who, ok := s.schedulesOf(w, r)
	if !ok {
		return
	}
	s.scheduleAction(w, r, ops, who, scheduleops.Delete, r.PathValue("name"))
}

// handleScheduleAction is POST /api/schedules/{name}/pause|resume|trigger.
func (s *Server) handleScheduleAction(w http.ResponseWriter, r *http.Request) {
	ops, who, ok := s.schedulesOf(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	action, ok := scheduleops.ParseAction(r.PathValue("action"))
	if !ok || action == scheduleops.Delete {
		s.refuse(w, r, who.ID, "", http.StatusNotFound, CodeNotFound, fmt.Sprintf("no action %q: POST /api/schedules/{name}/pause, /resume or /trigger, or DELETE /api/schedules/{name}", r.PathValue("action")))
		return
	}
	s.scheduleAction(w, r, ops, who, action, name)
}

func (s *Server) scheduleAction(w http.ResponseWriter, r *http.Request, ops scheduleops.Ops, who tokens.Identity, action scheduleops.Action, name string) {
	out, err := ops.Do(r.Context(), action, name, who.ID)
	if err != nil {
		s.scheduleError(w, r, who, name, err)
		return
	}
	ev := s.log.Info().Str("schedule", name).Str("by", who.ID).Str("action", string(action))
	if fire, ok := out.(schedule.Fire); ok {
		ev = ev.Str("run_id", fire.RunID).Str("result", string(fire.Result))
	}
	ev.Msg("schedule " + string(action))
	writeJSON(w, http.StatusOK, out)
}

// scheduleError answers what scheduleops refused: a bad spec 400 (the
// message of the CLI's exit 2, naming the field and the value), an
// unknown schedule 404, a name taken 409 exists, a full store 409
// too_many, a trigger whose run could not be started 409.
func (s *Server) scheduleError(w http.ResponseWriter, r *http.Request, who tokens.Identity, name string, err error) {
	status, code := http.StatusInternalServerError, CodeInternal
	switch {
	case errors.Is(err, schedule.ErrBadSpec):
		status, code = http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, schedule.ErrNotFound):
		status, code = http.StatusNotFound, CodeNotFound
	case errors.Is(err, schedule.ErrExists):
		status, code = http.StatusConflict, CodeExists
	case errors.Is(err, schedule.ErrTooMany):
		status, code = http.StatusConflict, CodeTooMany
	case errors.Is(err, scheduleops.ErrNotStarted):
		status, code = http.StatusConflict, CodeNotStarted
	case errors.Is(err, client.ErrUnknownWorkflow):
		// Decided and kept: the schedulers start it once a worker
		// registers the workflow, within the catch-up window.
		status, code = http.StatusConflict, CodeNotStarted
		err = fmt.Errorf("%w; the trigger is kept and started by the schedulers once a worker registers the workflow, within the schedule's catch-up window", err)
	}
	if status == http.StatusInternalServerError {
		s.log.Error().Err(err).Str("schedule", name).Str("by", who.ID).Str("path", r.URL.Path).Msg("schedule request failed")
		writeError(w, status, code, fmt.Sprintf("the approver could not complete the request (%v): check the schedule and try again", err))
		return
	}
	s.refused(r, who.ID, "", status, code, err.Error())
	writeError(w, status, code, err.Error())
}
