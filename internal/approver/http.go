package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// Error codes of the HTTP API, in the "code" field of an error body.
const (
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeNotWaiting       = "not_waiting"
	CodeStaleHash        = "stale_hash"
	CodeWrongStep        = "wrong_step"
	CodeBadRequest       = "bad_request"
	CodeTooLarge         = "too_large"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal"
)

// ChannelHeader set to "page" records a decision as taken on the inbox page.
const ChannelHeader = "X-Durable-Channel"

// Approval is a pending approval as the API shows it.
type Approval struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Step     int    `json:"step"`
	StepName string `json:"step_name"`
	Group    string `json:"group"`
	// Payload is exactly what the step asks the approver to look at.
	Payload       json.RawMessage `json:"payload"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Since         time.Time       `json:"since"`
	Deadline      time.Time       `json:"deadline"`
}

// List is the body of GET /api/approvals.
type List struct {
	Approvals []Approval `json:"approvals"`
	// Truncated: more approvals are pending than MaxList.
	Truncated bool `json:"truncated"`
}

// DecisionRequest is the body of POST /api/approvals/{run}/approve|reject.
type DecisionRequest struct {
	// PayloadSHA256 names the payload the decider saw. Required.
	PayloadSHA256 string `json:"payload_sha256"`
	Reason        string `json:"reason,omitempty"`
	// Step, when not 0, must be the parked step.
	Step int `json:"step,omitempty"`
}

// DecisionResult is the answer to a recorded decision.
type DecisionResult struct {
	RunID         string             `json:"run_id"`
	Status        checkpoint.Status  `json:"status"`
	Step          int                `json:"step"`
	Decision      checkpoint.Verdict `json:"decision"`
	By            string             `json:"by"`
	Channel       string             `json:"channel"`
	PayloadSHA256 string             `json:"payload_sha256"`
	At            time.Time          `json:"at"`
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Handler serves the API, the inbox page at / and /healthz, /readyz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/approvals", s.method(http.MethodGet, s.handleList))
	mux.HandleFunc("/api/approvals/{run}", s.method(http.MethodGet, s.handleGet))
	mux.HandleFunc("/api/approvals/{run}/{action}", s.method(http.MethodPost, s.handleDecide))
	mux.HandleFunc("/api/runs/{run}/signals/{name}", s.method(http.MethodPost, s.handleSignal))
	mux.HandleFunc("/api/runs", s.method(http.MethodGet, s.handleRuns))
	mux.HandleFunc("/api/runs/{run}", s.method(http.MethodGet, s.handleRun))
	mux.HandleFunc("/api/runs/{run}/{action}", s.method(http.MethodPost, s.handleRunAction))
	mux.HandleFunc("/api/dlq", s.method(http.MethodGet, s.handleDLQ))
	mux.HandleFunc("/api/schedules", s.methods(map[string]http.HandlerFunc{http.MethodGet: s.handleSchedules, http.MethodPost: s.handleCreateSchedule}))
	mux.HandleFunc("/api/schedules/{name}", s.methods(map[string]http.HandlerFunc{http.MethodGet: s.handleSchedule, http.MethodDelete: s.handleDeleteSchedule}))
	mux.HandleFunc("/api/schedules/{name}/{action}", s.method(http.MethodPost, s.handleScheduleAction))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, "no such endpoint: the API is GET /api/approvals, GET /api/approvals/{run}, POST /api/approvals/{run}/approve and /reject, "+
			"POST /api/runs/{run}/signals/{name}, GET /api/runs, GET /api/runs/{run}, POST /api/runs/{run}/cancel and /redrive, GET /api/dlq, "+
			"GET and POST /api/schedules, GET and DELETE /api/schedules/{name}, POST /api/schedules/{name}/pause, /resume and /trigger")
	})
	mux.HandleFunc("/healthz", s.method(http.MethodGet, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	}))
	mux.HandleFunc("/readyz", s.method(http.MethodGet, s.handleReady))
	if s.cfg.Metrics != nil {
		mux.Handle("/metrics", s.cfg.Metrics)
	}
	mux.HandleFunc("/{$}", s.method(http.MethodGet, s.handlePage))
	mux.HandleFunc("/runs", s.method(http.MethodGet, s.handleRunsPage))
	mux.HandleFunc("/runs/{run}", s.method(http.MethodGet, s.handleRunsPage))
	mux.HandleFunc("/dlq", s.method(http.MethodGet, s.handleRunsPage))
	mux.HandleFunc("/schedules", s.method(http.MethodGet, s.handleRunsPage))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) method(m string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("%s %s is not supported: use %s", r.Method, r.URL.Path, m))
			return
		}
		h(w, r)
	}
}

// methods serves each method of hs with its handler (HEAD with GET's)
// and answers 405 for the others.
func (s *Server) methods(hs map[string]http.HandlerFunc) http.HandlerFunc {
	var allowed []string
	for m := range hs {
		allowed = append(allowed, m)
	}
	sort.Strings(allowed)
	return func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		if h, ok := hs[m]; ok {
			h(w, r)
			return
		}
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("%s %s is not supported: use %s", r.Method, r.URL.Path, strings.Join(allowed, " or ")))
	}
}

// identify returns the caller's verified identity, or answers 401.
func (s *Server) identify(w http.ResponseWriter, r *http.Request) (tokens.Identity, bool) {
	auth := r.Header.Get("Authorization")
	scheme, tok, _ := strings.Cut(auth, " ")
	tok = strings.TrimSpace(tok)
	var msg string
	switch {
	case auth == "":
		msg = "missing token: send Authorization: Bearer <token> (an operator creates one with `durable token create`)"
	case !strings.EqualFold(scheme, "Bearer") || tok == "":
		msg = "malformed Authorization header: send Authorization: Bearer <token>"
	default:
		if who, ok := s.cfg.Tokens.Lookup(tok); ok {
			if who.Groups == nil {
				who.Groups = []string{} // nil would mean "unchecked" to client.Decide
			}
			return who, true
		}
		msg = "token not recognised: check it, or ask an operator for a new one (`durable token create`)"
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="durable approver"`)
	s.refused(r, "", "", http.StatusUnauthorized, CodeUnauthorized, msg)
	writeError(w, http.StatusUnauthorized, CodeUnauthorized, msg)
	return tokens.Identity{}, false
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	who, ok := s.identify(w, r)
	if !ok {
		return
	}
	runs, err := s.store.ListRuns(r.Context(), checkpoint.Filter{Status: checkpoint.StatusWaiting})
	if err != nil {
		s.internal(w, r, who.ID, "", fmt.Errorf("list waiting runs: %w", err))
		return
	}
	out := List{Approvals: []Approval{}}
	for _, run := range runs {
		if run.Status == checkpoint.StatusWaiting && run.Wait != nil && slices.Contains(who.Groups, run.Wait.Group) {
			out.Approvals = append(out.Approvals, approvalOf(run))
		}
	}
	sort.SliceStable(out.Approvals, func(i, j int) bool {
		a, b := out.Approvals[i], out.Approvals[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		return a.RunID < b.RunID
	})
	if len(out.Approvals) > s.cfg.MaxList {
		out.Approvals, out.Truncated = out.Approvals[:s.cfg.MaxList], true
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	who, ok := s.identify(w, r)
	if !ok {
		return
	}
	run, ok := s.waitingRun(w, r, who)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, approvalOf(run))
}

// waitingRun reads the run named in the path and answers 404, 409 or 403
// unless it is waiting for one of the caller's groups. The check is
// repeated by client.Decide; doing it first keeps a caller outside the
// group from learning anything about the pending request but its group.
func (s *Server) waitingRun(w http.ResponseWriter, r *http.Request, who tokens.Identity) (checkpoint.Run, bool) {
	id := r.PathValue("run")
	if queue.ValidateRunID(id) != nil {
		s.refuse(w, r, who.ID, id, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %q: run ids are 1-128 letters, digits, '-' or '_'", id))
		return checkpoint.Run{}, false
	}
	run, err := s.store.GetRun(r.Context(), id)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		s.refuse(w, r, who.ID, id, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s: check the id against GET /api/approvals", id))
		return run, false
	case err != nil:
		s.internal(w, r, who.ID, id, fmt.Errorf("read run %s: %w", id, err))
		return run, false
	case run.Status != checkpoint.StatusWaiting || run.Wait == nil:
		s.refuse(w, r, who.ID, id, http.StatusConflict, CodeNotWaiting, notWaitingMsg(run))
		return run, false
	case !slices.Contains(who.Groups, run.Wait.Group):
		s.refuse(w, r, who.ID, id, http.StatusForbidden, CodeForbidden, fmt.Sprintf("run %s waits for a decision by group %s; %s is in %s: ask someone in %s", id, run.Wait.Group, who.ID, strings.Join(who.Groups, ", "), run.Wait.Group))
		return run, false
	}
	return run, true
}

func notWaitingMsg(run checkpoint.Run) string {
	return fmt.Sprintf("run %s is %s at step %d and waits for no decision: it was decided, expired or moved on; reload the pending list", run.ID, run.Status, run.Step)
}

func (s *Server) handleDecide(w http.ResponseWriter, r *http.Request) {
	reject := false
	switch r.PathValue("action") {
	case "approve":
	case "reject":
		reject = true
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no action %q: POST .../approve or .../reject", r.PathValue("action")))
		return
	}
	who, ok := s.identify(w, r)
	if !ok {
		return
	}
	id := r.PathValue("run")
	req, status, msg := s.readDecision(w, r)
	if status != 0 {
		code := CodeBadRequest
		if status == http.StatusRequestEntityTooLarge {
			code = CodeTooLarge
		}
		s.refuse(w, r, who.ID, id, status, code, msg)
		return
	}
	if _, ok := s.waitingRun(w, r, who); !ok {
		return
	}
	channel := client.ChannelAPI
	if strings.EqualFold(r.Header.Get(ChannelHeader), client.ChannelPage) {
		channel = client.ChannelPage
	}
	run, err := s.cfg.Client.Decide(r.Context(), client.Decision{
		RunID: id, By: who.ID, Reject: reject, Reason: req.Reason, Channel: channel,
		PayloadSHA256: req.PayloadSHA256, Step: req.Step, Groups: who.Groups, FourEyes: s.cfg.FourEyes,
	})
	if err != nil {
		status, code, msg := decideError(id, run, who, req, err)
		if status == http.StatusInternalServerError {
			s.internal(w, r, who.ID, id, err)
			return
		}
		s.refuse(w, r, who.ID, id, status, code, msg)
		return
	}
	a := run.Approvals[len(run.Approvals)-1]
	s.log.Info().Str("run_id", run.ID).Int("step", a.Step).Str("by", a.By).Str("channel", a.Channel).
		Str("decision", string(a.Decision)).Str("payload_sha256", a.PayloadSHA256).Str("remote", r.RemoteAddr).Msg("decision recorded")
	writeJSON(w, http.StatusOK, DecisionResult{
		RunID: run.ID, Status: run.Status, Step: a.Step, Decision: a.Decision, By: a.By,
		Channel: a.Channel, PayloadSHA256: a.PayloadSHA256, At: a.At,
	})
}

// decideError maps a refusal of client.Decide to an HTTP answer. The
// messages name what to do and never the pending hash: a decider whose
// hash is stale must look at the new payload, not copy its hash.
func decideError(id string, run checkpoint.Run, who tokens.Identity, req DecisionRequest, err error) (int, string, string) {
	switch {
	case errors.Is(err, client.ErrNotFound):
		return http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", id)
	case errors.Is(err, client.ErrNotWaiting):
		return http.StatusConflict, CodeNotWaiting, notWaitingMsg(run)
	case errors.Is(err, client.ErrWrongStep):
		return http.StatusConflict, CodeWrongStep, fmt.Sprintf("run %s waits at step %d, not step %d: reload it (GET /api/approvals/%s) and decide again", run.ID, run.Wait.Step, req.Step, run.ID)
	case errors.Is(err, client.ErrStaleHash):
		return http.StatusConflict, CodeStaleHash, fmt.Sprintf("run %s no longer asks about the payload with sha256 %s: reload it (GET /api/approvals/%s), review the new payload and decide again", run.ID, req.PayloadSHA256, run.ID)
	case errors.Is(err, client.ErrForbidden):
		if run.Wait != nil && !slices.Contains(who.Groups, run.Wait.Group) {
			return http.StatusForbidden, CodeForbidden, fmt.Sprintf("run %s waits for a decision by group %s; %s is in %s", run.ID, run.Wait.Group, who.ID, strings.Join(who.Groups, ", "))
		}
		return http.StatusForbidden, CodeForbidden, fmt.Sprintf("run %s was started by %s, who may not also decide it (four-eyes rule): ask another member of %s", run.ID, who.ID, groupOf(run))
	}
	return http.StatusInternalServerError, CodeInternal, ""
}

func groupOf(run checkpoint.Run) string {
	if run.Wait != nil {
		return run.Wait.Group
	}
	return "the group"
}

// readDecision decodes the body; a non-zero status says why it is refused.
func (s *Server) readDecision(w http.ResponseWriter, r *http.Request) (DecisionRequest, int, string) {
	var req DecisionRequest
	tooLarge := fmt.Sprintf("body over %d bytes: send only payload_sha256, reason and step", s.cfg.MaxBody)
	if r.ContentLength > s.cfg.MaxBody {
		return req, http.StatusRequestEntityTooLarge, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, http.StatusRequestEntityTooLarge, tooLarge
		}
		return req, http.StatusBadRequest, "could not read the body: " + err.Error()
	}
	const shape = `send {"payload_sha256": "<hash of the payload you reviewed>", "reason": "...", "step": n}`
	if len(bytes.TrimSpace(body)) == 0 {
		return req, http.StatusBadRequest, "empty body: " + shape
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, http.StatusBadRequest, fmt.Sprintf("malformed JSON body (%v): %s", err, shape)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, http.StatusBadRequest, "trailing data after the JSON body: " + shape
	}
	req.PayloadSHA256 = strings.ToLower(strings.TrimSpace(req.PayloadSHA256))
	switch {
	case req.PayloadSHA256 == "":
		return req, http.StatusBadRequest, "payload_sha256 is required: an approval names the payload it approves (the payload_sha256 of GET /api/approvals/{run})"
	case !sha256RE.MatchString(req.PayloadSHA256):
		return req, http.StatusBadRequest, "payload_sha256 must be 64 hex digits (the payload_sha256 of GET /api/approvals/{run})"
	case req.Step < 0:
		return req, http.StatusBadRequest, "step must be a positive step number, or left out"
	}
	req.Reason = strings.TrimSpace(req.Reason)
	return req, 0, ""
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.cfg.NATS != nil && !s.cfg.NATS.IsConnected() {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "not connected to NATS")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.store.GetRun(ctx, "readyz-probe"); err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "checkpoint store unreachable")
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func approvalOf(run checkpoint.Run) Approval {
	w := run.Wait
	return Approval{
		RunID: run.ID, Workflow: run.Workflow, Step: w.Step, StepName: w.StepName, Group: w.Group,
		Payload: w.Payload, PayloadSHA256: w.PayloadSHA256, Since: w.Since, Deadline: w.Deadline,
	}
}

// refuse answers an error and logs the refusal (never the token or payload).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, by, runID string, status int, code, msg string) {
	s.refused(r, by, runID, status, code, msg)
	writeError(w, status, code, msg)
}

func (s *Server) refused(r *http.Request, by, runID string, status int, code, msg string) {
	var ev *zerolog.Event
	if status == http.StatusNotFound {
		ev = s.log.Info()
	} else {
		ev = s.log.Warn()
	}
	if runID != "" {
		ev = ev.Str("run_id", runID)
	}
	if by != "" {
		ev = ev.Str("by", by)
	}
	ev.Str("method", r.Method).Str("path", r.URL.Path).
		Int("status", status).Str("code", code).Str("remote", r.RemoteAddr).Str("why", msg).Msg("request refused")
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, by, runID string, err error) {
	s.log.Error().Err(err).Str("run_id", runID).Str("by", by).Str("path", r.URL.Path).Msg("approval request failed")
	writeError(w, http.StatusInternalServerError, CodeInternal, fmt.Sprintf("the approver could not complete the request (%v): check the run and try again", err))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
