package approver

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// The runs API: what `durable runs list`, `runs show --json`, `dlq list`,
// `cancel` and `redrive` give an operator, over HTTP with the approver's
// bearer tokens. Every endpoint needs a token of OperatorsGroup: a run's
// record holds its input and its approval payloads, which an adjuster's
// token (scoped to its groups' approvals) must not read.

// OperatorsGroup is the token group that may read runs and cancel or
// redrive them through the API, and read and change schedules.
const OperatorsGroup = "operators"

// CodeConflict: the run is not in a state the action applies to.
const CodeConflict = "conflict"

// Page sizes of GET /api/runs.
const (
	DefaultRunsLimit = 100
	MaxRunsLimit     = 1000
)

// RunsPage is the body of GET /api/runs: runs newest first.
type RunsPage struct {
	Runs []client.RunSummary `json:"runs"`
	// NextCursor continues the listing after the last run of this page;
	// empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Counts are the runs of the workflow filter (every status) by status,
	// each status present: the store's counters.
	Counts map[checkpoint.Status]int `json:"counts"`
}

// DeadLetterView is a dead letter with its run's status now.
type DeadLetterView struct {
	queue.DeadLetter
	// RunStatus is the run's status now ("dead" until it is redriven);
	// empty when the run is gone.
	RunStatus checkpoint.Status `json:"run_status,omitempty"`
}

// DeadLetters is the body of GET /api/dlq, oldest first.
type DeadLetters struct {
	DeadLetters []DeadLetterView `json:"dead_letters"`
}

// ActionResult is the answer to a cancel or a redrive.
type ActionResult struct {
	RunID   string            `json:"run_id"`
	Action  string            `json:"action"`
	Status  checkpoint.Status `json:"status"`
	Step    int               `json:"step"`
	By      string            `json:"by"`
	Channel string            `json:"channel"`
	At      time.Time         `json:"at"`
}

// operator returns the caller's identity if it holds an operators token,
// or answers 401 or 403.
func (s *Server) operator(w http.ResponseWriter, r *http.Request) (tokens.Identity, bool) {
	who, ok := s.identify(w, r)
	if !ok {
		return who, false
	}
	if !slices.Contains(who.Groups, OperatorsGroup) {
		s.refuse(w, r, who.ID, r.PathValue("run"), http.StatusForbidden, CodeForbidden,
			fmt.Sprintf("the operators' API (runs, dead letters, schedules) needs a token of group %q; %s is in %v", OperatorsGroup, who.ID, who.Groups))
		return who, false
	}
	return who, true
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	who, ok := s.operator(w, r)
	if !ok {
		return
	}
	q, bad := parseRunsQuery(r)
	if bad != "" {
		s.refuse(w, r, who.ID, "", http.StatusBadRequest, CodeBadRequest, bad)
		return
	}
	page, err := s.cfg.Client.ListPage(r.Context(), client.ListFilter{Status: q.status, Workflow: q.workflow}, q.limit, q.after)
	if err != nil {
		s.internal(w, r, who.ID, "", err)
		return
	}
	counts, err := s.cfg.Client.Counts(r.Context())
	if err != nil {
		s.internal(w, r, who.ID, "", err)
		return
	}
	body := RunsPage{Runs: page.Runs, NextCursor: page.Next.String(), Counts: map[checkpoint.Status]int{}}
	if body.Runs == nil {
		body.Runs = []client.RunSummary{}
	}
	byStatus := counts.Status
	if q.workflow != "" {
		byStatus = counts.Workflow[q.workflow]
	}
	for _, st := range checkpoint.Statuses() {
		body.Counts[st] = int(byStatus[st])
	}
	writeJSON(w, http.StatusOK, body)
}

// runsQuery is a parsed GET /api/runs.
type runsQuery struct {
	status   checkpoint.Status
	workflow string
	limit    int
	after    checkpoint.Cursor // the cursor: the last run of the page before
}

// parseRunsQuery reads status, workflow, limit and cursor, or says what is
// wrong with them.
func parseRunsQuery(r *http.Request) (runsQuery, string) {
	v := r.URL.Query()
	q := runsQuery{status: checkpoint.Status(v.Get("status")), workflow: v.Get("workflow"), limit: DefaultRunsLimit}
	if q.status != "" && !q.status.Valid() {
		return q, fmt.Sprintf("status %q: want running, waiting, completed, failed, cancelled or dead", q.status)
	}
	if q.workflow != "" && !checkpoint.ValidID(q.workflow) {
		return q, fmt.Sprintf("workflow %q: a workflow name is 1-128 letters, digits, '-' and '_'", q.workflow)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxRunsLimit {
			return q, fmt.Sprintf("limit %q: want 1-%d", l, MaxRunsLimit)
		}
		q.limit = n
	}
	if c := v.Get("cursor"); c != "" {
		k, err := checkpoint.ParseCursor(c)
		if err != nil {
			return q, fmt.Sprintf("cursor %q: not a cursor this API gave (pass next_cursor back as it is)", c)
		}
		q.after = k
	}
	return q, ""
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	who, ok := s.operator(w, r)
	if !ok {
		return
	}
	id := r.PathValue("run")
	if err := queue.ValidateRunID(id); err != nil {
		s.refuse(w, r, who.ID, "", http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	view, err := s.cfg.Client.Inspect(r.Context(), id)
	var purged *checkpoint.PurgedError
	if errors.As(err, &purged) {
		s.refuse(w, r, who.ID, id, http.StatusNotFound, CodeNotFound, purged.Error())
		return
	}
	if errors.Is(err, client.ErrNotFound) {
		s.refuse(w, r, who.ID, id, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", id))
		return
	}
	if err != nil {
		s.internal(w, r, who.ID, id, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

func (s *Server) handleDLQ(w http.ResponseWriter, r *http.Request) {
	who, ok := s.operator(w, r)
	if !ok {
		return
	}
	out := DeadLetters{DeadLetters: []DeadLetterView{}}
	letters, err := s.cfg.Client.DeadLetters(r.Context())
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		s.internal(w, r, who.ID, "", err)
		return
	}
	for _, dl := range letters {
		v := DeadLetterView{DeadLetter: dl}
		if run, err := s.store.GetRun(r.Context(), dl.RunID); err == nil {
			v.RunStatus = run.Status
		}
		out.DeadLetters = append(out.DeadLetters, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleRunAction cancels or redrives a run, audited with the caller's
// identity and channel (the page's header, else the API).
func (s *Server) handleRunAction(w http.ResponseWriter, r *http.Request) {
	who, ok := s.operator(w, r)
	if !ok {
		return
	}
	id, action := r.PathValue("run"), r.PathValue("action")
	if action != "cancel" && action != "redrive" {
		s.refuse(w, r, who.ID, id, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no action %q: POST /api/runs/{run}/cancel or /redrive", action))
		return
	}
	if err := queue.ValidateRunID(id); err != nil {
		s.refuse(w, r, who.ID, "", http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	channel := client.ChannelAPI
	if r.Header.Get(ChannelHeader) == client.ChannelPage {
		channel = client.ChannelPage
	}
	var run checkpoint.Run
	var err error
	if action == "cancel" {
		run, err = s.cfg.Client.Cancel(r.Context(), id, who.ID, client.Via(channel))
	} else {
		run, err = s.cfg.Client.Redrive(r.Context(), id, who.ID, client.Via(channel))
	}
	switch {
	case errors.Is(err, client.ErrNotFound):
		s.refuse(w, r, who.ID, id, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", id))
		return
	case errors.Is(err, client.ErrNotActive), errors.Is(err, client.ErrNotDead),
		// A redrive refused because a child it would wait for cannot
		// start: the run stays dead, unchanged.
		errors.Is(err, client.ErrBadInput), errors.Is(err, client.ErrUnknownWorkflow):
		s.refuse(w, r, who.ID, id, http.StatusConflict, CodeConflict, err.Error())
		return
	case err != nil && run.ID == "":
		s.internal(w, r, who.ID, id, err)
		return
	case err != nil:
		// Stored, with a follow-up that failed (a child's cancel, the
		// redriven step's publish): the scheduler's repair finishes it.
		s.log.Warn().Err(err).Str("run_id", id).Str("by", who.ID).Str("action", action).Msg("run action stored, follow-up failed")
	}
	s.log.Info().Str("run_id", id).Str("by", who.ID).Str("channel", channel).Str("action", action).Str("status", string(run.Status)).Msg("run " + action)
	writeJSON(w, http.StatusOK, ActionResult{RunID: run.ID, Action: action, Status: run.Status, Step: run.Step, By: who.ID, Channel: channel, At: run.UpdatedAt})
}
