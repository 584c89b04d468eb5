package approver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// SignalSubjectPrefix: external systems publish signals on
// SignalSubjectPrefix+<system>, signed as approval events are.
const SignalSubjectPrefix = "durable.signals."

// Error code of a signal the run's workflow never waits for.
const CodeUnknownSignal = "unknown_signal"

// SignalRequest is the body of POST /api/runs/{run}/signals/{name}; an
// empty body sends the signal without data.
type SignalRequest struct {
	// Data is the signal's JSON data (at most 64 KiB).
	Data json.RawMessage `json:"data,omitempty"`
	// ID identifies the signal for retries: the same id again changes
	// nothing. Default: a new id.
	ID string `json:"id,omitempty"`
}

// SignalResult answers a delivered signal.
type SignalResult struct {
	RunID  string            `json:"run_id"`
	Status checkpoint.Status `json:"status"`
	Signal checkpoint.Signal `json:"signal"`
	// Resumed: the run was waiting for the signal and runs again.
	Resumed bool `json:"resumed"`
	// Duplicate: a signal of this id was delivered before; nothing changed.
	Duplicate bool `json:"duplicate"`
}

// handleSignal is POST /api/runs/{run}/signals/{name}: a token of the
// groups the run's workflow names for the signal (steps.Workflow.Signal),
// or of operators, may send it; when the workflow names none, any token
// may. The signal is recorded with the token's identity.
func (s *Server) handleSignal(w http.ResponseWriter, r *http.Request) {
	who, ok := s.identify(w, r)
	if !ok {
		return
	}
	id, name := r.PathValue("run"), r.PathValue("name")
	if !s.maySignal(w, r, who, id, name) {
		return
	}
	limit := int64(checkpoint.MaxSignalBytes + 4<<10)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		s.refuse(w, r, who.ID, id, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body over %d bytes: a signal's data is at most %d bytes; put large data in the blob store and send its reference", limit, checkpoint.MaxSignalBytes))
		return
	}
	var req SignalRequest
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			s.refuse(w, r, who.ID, id, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf(`malformed JSON body (%v): send {"data": <JSON>, "id": "<optional id for retries>"}`, err))
			return
		}
	}
	res, err := s.cfg.Client.Signal(r.Context(), client.SignalRequest{RunID: id, Name: name, Data: req.Data, ID: req.ID, By: who.ID, Channel: client.ChannelAPI})
	s.countSignal(client.ChannelAPI, res, err)
	if err != nil {
		status, code, msg := signalError(id, err)
		if status == http.StatusInternalServerError {
			s.internal(w, r, who.ID, id, err)
			return
		}
		s.refuse(w, r, who.ID, id, status, code, msg)
		return
	}
	s.log.Info().Str("run_id", id).Str("signal", name).Str("signal_id", res.Signal.ID).Str("by", who.ID).
		Bool("resumed", res.Resumed).Bool("duplicate", res.Duplicate).Msg("signal delivered")
	writeJSON(w, http.StatusOK, SignalResult{RunID: res.Run.ID, Status: res.Run.Status, Signal: res.Signal, Resumed: res.Resumed, Duplicate: res.Duplicate})
}

// maySignal answers 403 (and counts a refused signal) unless who may send
// signal name to run id. Whatever it cannot judge (an unknown run or
// workflow, a name the workflow does not declare) it leaves to
// client.Signal, which refuses it with the same answer as before groups.
// A run's workflow and version never change, so the check cannot go stale
// before the signal is stored.
func (s *Server) maySignal(w http.ResponseWriter, r *http.Request, who tokens.Identity, id, name string) bool {
	if queue.ValidateRunID(id) != nil || slices.Contains(who.Groups, OperatorsGroup) {
		return true
	}
	run, err := s.store.GetRun(r.Context(), id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return true
	}
	if err != nil {
		s.internal(w, r, who.ID, id, fmt.Errorf("read run %s: %w", id, err))
		return false
	}
	infos, err := s.store.Workflows(r.Context())
	if err != nil {
		s.internal(w, r, who.ID, id, fmt.Errorf("read registered workflows: %w", err))
		return false
	}
	var groups []string
	for _, info := range infos {
		if info.Name == run.Workflow && info.Version == run.Version {
			groups = info.SignalGroups[name]
		}
	}
	if len(groups) == 0 || slices.ContainsFunc(who.Groups, func(g string) bool { return slices.Contains(groups, g) }) {
		return true
	}
	s.countSignal(client.ChannelAPI, client.SignalResult{}, errSignalForbidden)
	s.refuse(w, r, who.ID, id, http.StatusForbidden, CodeForbidden,
		fmt.Sprintf("signal %s of run %s (%s v%d) may be sent by group %s or %s; %s is in %s: ask someone in %s",
			name, id, run.Workflow, run.Version, strings.Join(groups, ", "), OperatorsGroup, who.ID, strings.Join(who.Groups, ", "), strings.Join(groups, " or ")))
	return false
}

var errSignalForbidden = errors.New("signal outside the caller's groups")

// signalError maps a refusal of client.Signal to an HTTP answer.
func signalError(id string, err error) (int, string, string) {
	switch {
	case errors.Is(err, client.ErrNotFound):
		return http.StatusNotFound, CodeNotFound, fmt.Sprintf("no run %s", id)
	case errors.Is(err, client.ErrBadSignal):
		return http.StatusBadRequest, CodeBadRequest, err.Error()
	case errors.Is(err, client.ErrNotActive):
		return http.StatusConflict, CodeNotWaiting, err.Error()
	case errors.Is(err, client.ErrUnknownSignal):
		return http.StatusConflict, CodeUnknownSignal, err.Error()
	case errors.Is(err, client.ErrSignalIDReused):
		return http.StatusConflict, CodeBadRequest, err.Error()
	case errors.Is(err, client.ErrTooManySignals):
		return http.StatusRequestEntityTooLarge, CodeTooLarge, err.Error()
	}
	return http.StatusInternalServerError, CodeInternal, err.Error()
}

// SignalEvent is an external system's signal, published on
// SignalSubjectPrefix+<system> and signed like an approval Event.
type SignalEvent struct {
	// ID is unique per system; it is also the signal's identity on the
	// run, so a replay (to any approver replica) is delivered once.
	ID     string          `json:"id"`
	System string          `json:"system"`
	RunID  string          `json:"run_id"`
	Name   string          `json:"name"`
	Data   json.RawMessage `json:"data,omitempty"`
	// By is who or what sent it at that system; recorded "<system>:<by>".
	By string    `json:"by"`
	TS time.Time `json:"ts"`
}

func (e *SignalEvent) from() string      { return e.System }
func (e *SignalEvent) eventID() string   { return e.ID }
func (e *SignalEvent) sentAt() time.Time { return e.TS }

func (e *SignalEvent) invalid() string {
	switch {
	case e.ID == "" || len(e.ID) > 200:
		return "id must be 1-200 characters"
	case e.System == "":
		return "system is required"
	case queue.ValidateRunID(e.RunID) != nil:
		return fmt.Sprintf("run_id %q is not a run id", e.RunID)
	case !checkpoint.ValidSignalName(e.Name):
		return fmt.Sprintf("name %q: use 1-64 letters, digits, '-' or '_'", e.Name)
	case strings.TrimSpace(e.By) == "" || len(e.By) > 128 || strings.ContainsFunc(e.By, isControl):
		return "by must name the sender (1-128 printable characters)"
	case e.TS.IsZero():
		return "ts is required (RFC3339)"
	}
	return ""
}

// handleSignalEvent delivers a signed signal event and answers a request.
func (s *Server) handleSignalEvent(msg *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	system := strings.TrimPrefix(msg.Subject, SignalSubjectPrefix)
	ev, reason, detail := s.signalEvent(ctx, system, msg.Header.Get(SignatureHeader), msg.Data, time.Now())
	s.events.count(reason)
	if reason == "" {
		s.log.Info().Str("system", system).Str("event_id", ev.ID).Str("run_id", ev.RunID).Str("signal", ev.Name).
			Str("by", system+":"+ev.By).Str("channel", client.ChannelEvent).Msg("signal delivered")
	} else {
		s.log.Warn().Str("system", system).Str("event_id", ev.ID).Str("run_id", ev.RunID).Str("signal", ev.Name).
			Str("reason", reason).Str("why", detail).Msg("signal event rejected")
	}
	if msg.Reply == "" {
		return
	}
	reply := EventReply{OK: reason == ""}
	if reason != "" {
		reply.Code, reply.Error = reason, signalReplyText(reason, detail)
	}
	b, _ := json.Marshal(reply)
	if err := msg.Respond(b); err != nil {
		s.log.Warn().Err(err).Str("system", system).Str("event_id", ev.ID).Msg("reply to signal event")
	}
}

func signalReplyText(reason, detail string) string {
	switch reason {
	case RejectMalformed:
		return "malformed signal event: want JSON {id, system, run_id, name, data, by, ts RFC3339}: " + detail
	case RejectNotWaiting:
		return "the run has ended"
	case RejectUnknownSignal:
		return "the run's workflow waits for no signal of that name"
	}
	return replyText(reason)
}

// RejectUnknownSignal: a signal event names a signal the run's workflow
// never waits for.
const RejectUnknownSignal = "unknown_signal"

// signalEvent checks a signal event as admitEvent checks an approval
// event (known system, signature over exactly body, well formed, fresh,
// not seen), then delivers it with client.Signal under an id derived from
// the system and the event's id.
func (s *Server) signalEvent(ctx context.Context, system, sig string, body []byte, now time.Time) (SignalEvent, string, string) {
	var ev SignalEvent
	key, reason, detail := s.admit(system, sig, body, now, &ev, "signal\x00")
	if reason != "" {
		return ev, reason, detail
	}
	sum := sha256.Sum256([]byte(system + "\x00" + ev.ID))
	res, err := s.cfg.Client.Signal(ctx, client.SignalRequest{
		RunID: ev.RunID, Name: ev.Name, Data: ev.Data, ID: "ev-" + hex.EncodeToString(sum[:16]),
		By: system + ":" + ev.By, Channel: client.ChannelEvent,
	})
	s.countSignal(client.ChannelEvent, res, err)
	switch {
	case err == nil:
		return ev, "", ""
	case errors.Is(err, client.ErrNotFound):
		return ev, RejectNotFound, err.Error()
	case errors.Is(err, client.ErrNotActive):
		return ev, RejectNotWaiting, err.Error()
	case errors.Is(err, client.ErrUnknownSignal):
		return ev, RejectUnknownSignal, err.Error()
	case errors.Is(err, client.ErrBadSignal), errors.Is(err, client.ErrSignalIDReused), errors.Is(err, client.ErrTooManySignals):
		return ev, RejectMalformed, err.Error()
	}
	s.events.forget(key)
	return ev, RejectError, err.Error()
}

// countSignal reports a signal's outcome to SignalMetrics.
func (s *Server) countSignal(channel string, res client.SignalResult, err error) {
	if s.cfg.SignalMetrics == nil {
		return
	}
	outcome := "received"
	switch {
	case err != nil:
		outcome = "refused"
	case res.Duplicate:
		outcome = "duplicate"
	}
	s.cfg.SignalMetrics.SignalReceived(channel, outcome)
}
