package approver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// External systems publish decisions on EventSubjectPrefix+<system>, the
// body signed with the system's secret in the SignatureHeader header.
const (
	EventSubjectPrefix = "durable.approvals."
	SignatureHeader    = "Durable-Signature"
	// EventQueue is the queue group of the approvers: each event is
	// handled by one replica.
	EventQueue = "durable-approver"
	// maxFuture is how far an event's ts may be ahead of the clock.
	maxFuture = time.Minute
)

// Reasons an event is rejected, the keys of EventStats.Rejected.
const (
	RejectUnknownSystem  = "unknown_system"
	RejectSystemMismatch = "system_mismatch"
	RejectBadSignature   = "bad_signature"
	RejectMalformed      = "malformed"
	RejectStale          = "stale"
	RejectFuture         = "future"
	RejectReplayed       = "replayed"
	RejectNotFound       = "not_found"
	RejectNotWaiting     = "not_waiting"
	RejectWrongStep      = "wrong_step"
	RejectStaleHash      = "stale_hash"
	RejectForbidden      = "forbidden"
	RejectError          = "error"
)

var systemRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// EventSystem is an external system allowed to decide through events.
type EventSystem struct {
	// Secret is the HMAC-SHA256 key the system signs its events with.
	Secret string `json:"secret"`
	// Groups the system decides for, as a token's groups do.
	Groups []string `json:"groups"`
}

func (e EventSystem) validate(name string) error {
	if !systemRE.MatchString(name) {
		return fmt.Errorf("event system %q: use 1-64 letters, digits, '-' or '_' (it is a NATS subject token)", name)
	}
	if len(e.Secret) < 16 {
		return fmt.Errorf("event system %s: the secret must be at least 16 characters (e.g. `openssl rand -hex 32`)", name)
	}
	if len(e.Groups) == 0 || slicesContainsEmpty(e.Groups) {
		return fmt.Errorf("event system %s: name the groups it decides for, e.g. \"groups\": [\"adjusters\"]", name)
	}
	return nil
}

func slicesContainsEmpty(s []string) bool {
	for _, v := range s {
		if strings.TrimSpace(v) == "" {
			return true
		}
	}
	return false
}

// LoadEventSecrets reads a JSON file {"<system>": {"secret": "...",
// "groups": ["..."]}} and validates it.
func LoadEventSecrets(path string) (map[string]EventSystem, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read event secrets: %w", err)
	}
	var m map[string]EventSystem
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("event secrets %s: %w (expected {\"<system>\": {\"secret\": \"...\", \"groups\": [\"adjusters\"]}})", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("event secrets %s: data after the first JSON object: keep every system in one object", path)
	}
	for name, sys := range m {
		if err := sys.validate(name); err != nil {
			return nil, fmt.Errorf("event secrets %s: %w", path, err)
		}
	}
	return m, nil
}

// Event is an external approval event.
type Event struct {
	// ID is unique per system: an id is accepted once (replay protection).
	ID     string `json:"id"`
	System string `json:"system"`
	RunID  string `json:"run_id"`
	Step   int    `json:"step"`
	// PayloadSHA256 names the payload the system's user approved.
	PayloadSHA256 string `json:"payload_sha256"`
	// Decision is "approved" or "rejected".
	Decision checkpoint.Verdict `json:"decision"`
	// By is who decided, at that system; recorded as "<system>:<by>".
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	TS     time.Time `json:"ts"`
}

// EventReply answers an event published as a request.
type EventReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Sign returns the SignatureHeader value for body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// EventStats counts the events handled since the server started.
type EventStats struct {
	Accepted uint64
	// Rejected counts refused events by reason (Reject* constants).
	Rejected map[string]uint64
}

// Stats returns a snapshot of the event counters.
func (s *Server) Stats() EventStats {
	e := s.events
	e.mu.Lock()
	defer e.mu.Unlock()
	return EventStats{Accepted: e.accepted, Rejected: maps.Clone(e.rejected)}
}

// eventState holds the counters and the ids seen recently. An id is kept
// longer than any ts the window accepts, so a replay is refused either as
// seen or as stale. Ids live in this process only: see the package doc.
type eventState struct {
	mu        sync.Mutex
	window    time.Duration
	keep      time.Duration
	seen      map[string]time.Time // key -> expiry
	lastPrune time.Time
	accepted  uint64
	rejected  map[string]uint64
}

func newEventState(window time.Duration) *eventState {
	return &eventState{window: window, keep: window + maxFuture + time.Minute, seen: map[string]time.Time{}, rejected: map[string]uint64{}}
}

// firstSight records key and reports whether it was not seen before.
func (e *eventState) firstSight(key string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now.Sub(e.lastPrune) > time.Minute {
		for k, exp := range e.seen {
			if now.After(exp) {
				delete(e.seen, k)
			}
		}
		e.lastPrune = now
	}
	if exp, ok := e.seen[key]; ok && now.Before(exp) {
		return false
	}
	e.seen[key] = now.Add(e.keep)
	return true
}

func (e *eventState) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.seen, key)
}

func (e *eventState) count(reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if reason == "" {
		e.accepted++
	} else {
		e.rejected[reason]++
	}
}

// consumeEvents subscribes in the queue group until ctx ends, then drains:
// events already received are still decided.
func (s *Server) consumeEvents(ctx context.Context) error {
	sub, err := s.cfg.NATS.QueueSubscribe(EventSubjectPrefix+"*", EventQueue, s.handleEvent)
	if err != nil {
		return fmt.Errorf("subscribe to approval events: %w", err)
	}
	signals, err := s.cfg.NATS.QueueSubscribe(SignalSubjectPrefix+"*", EventQueue, s.handleSignalEvent)
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("subscribe to signal events: %w", err)
	}
	closed := []<-chan nats.SubStatus{sub.StatusChanged(nats.SubscriptionClosed), signals.StatusChanged(nats.SubscriptionClosed)}
	// The subscription is registered again on every reconnect; the flush
	// only tells whether the server has it now.
	if err := s.cfg.NATS.FlushTimeout(5 * time.Second); err != nil {
		s.log.Warn().Err(err).Msg("approval events: subscription not confirmed by NATS yet")
	}
	s.log.Info().Str("subject", EventSubjectPrefix+"*").Int("systems", len(s.cfg.EventSecrets)).Str("signals", SignalSubjectPrefix+"*").Msg("consuming approval and signal events")
	<-ctx.Done()
	deadline := time.After(15 * time.Second)
	for k, sb := range []*nats.Subscription{sub, signals} {
		if err := sb.Drain(); err != nil {
			_ = sb.Unsubscribe()
			continue
		}
		select {
		case <-closed[k]:
		case <-deadline:
			_ = sb.Unsubscribe()
		}
	}
	return nil
}

func (s *Server) handleEvent(msg *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	system := strings.TrimPrefix(msg.Subject, EventSubjectPrefix)
	ev, reason, detail := s.decideEvent(ctx, system, msg.Header.Get(SignatureHeader), msg.Data, time.Now())
	s.events.count(reason)
	if reason == "" {
		s.log.Info().Str("system", system).Str("event_id", ev.ID).Str("run_id", ev.RunID).Int("step", ev.Step).
			Str("by", system+":"+ev.By).Str("channel", client.ChannelEvent).Str("decision", string(ev.Decision)).
			Str("payload_sha256", ev.PayloadSHA256).Msg("decision recorded")
	} else {
		s.log.Warn().Str("system", system).Str("event_id", ev.ID).Str("run_id", ev.RunID).Int("step", ev.Step).
			Str("reason", reason).Str("why", detail).Msg("approval event rejected")
		s.auditRefusal(ctx, system, ev, reason, detail)
	}
	if msg.Reply == "" {
		return
	}
	reply := EventReply{OK: reason == ""}
	if reason != "" {
		reply.Code, reply.Error = reason, replyText(reason)
	}
	b, _ := json.Marshal(reply)
	if err := msg.Respond(b); err != nil {
		s.log.Warn().Err(err).Str("system", system).Str("event_id", ev.ID).Msg("reply to approval event")
	}
}

// replyText tells the sender what was wrong. It never echoes the pending
// request (its hash, step or group) back: the sender is not trusted with
// more than it sent.
func replyText(reason string) string {
	switch reason {
	case RejectUnknownSystem:
		return "unknown system: the approver has no secret for it"
	case RejectSystemMismatch:
		return "the body's system is not the one in the subject"
	case RejectBadSignature:
		return "missing or bad signature: send header Durable-Signature: sha256=<hex HMAC-SHA256 of the body>"
	case RejectMalformed:
		return "malformed event: want JSON {id, system, run_id, step, payload_sha256, decision approved|rejected, by, reason, ts RFC3339}"
	case RejectStale:
		return "ts is too old: send events as they happen, with the current time"
	case RejectFuture:
		return "ts is in the future: check the sender's clock"
	case RejectReplayed:
		return "event id already seen: every event needs a new id"
	case RejectNotFound:
		return "no such run"
	case RejectNotWaiting:
		return "the run waits for no decision"
	case RejectWrongStep:
		return "the run waits at another step"
	case RejectStaleHash:
		return "the run no longer asks about that payload: show the user the current one"
	case RejectForbidden:
		return "this system may not decide this run"
	}
	return "the decision could not be recorded; send it again with a new id"
}

// decideEvent checks an event and decides through client.Decide. It
// returns the reason it was rejected ("" when accepted) and a detail for
// the log. Cheap checks that need no trust come first; the body is parsed
// only once its signature holds.
func (s *Server) decideEvent(ctx context.Context, system, sig string, body []byte, now time.Time) (Event, string, string) {
	ev, key, reason, detail := s.admitEvent(system, sig, body, now)
	if reason != "" {
		return ev, reason, detail
	}
	sys := s.cfg.EventSecrets[system]
	// A system outside the run's group learns nothing more than that:
	// client.Decide would check the step and the hash first.
	if run, err := s.store.GetRun(ctx, ev.RunID); err == nil && run.Status == checkpoint.StatusWaiting && run.Wait != nil && !slices.Contains(sys.Groups, run.Wait.Group) {
		return ev, RejectForbidden, fmt.Sprintf("run %s waits for group %s; system %s decides for %v", run.ID, run.Wait.Group, system, sys.Groups)
	}
	_, err := s.cfg.Client.Decide(ctx, client.Decision{
		RunID: ev.RunID, By: system + ":" + ev.By, Reject: ev.Decision == checkpoint.DecisionRejected, Reason: ev.Reason,
		Channel: client.ChannelEvent, PayloadSHA256: ev.PayloadSHA256, Step: ev.Step,
		Groups: append([]string{}, sys.Groups...), FourEyes: s.cfg.FourEyes,
	})
	switch {
	case err == nil:
		return ev, "", ""
	case errors.Is(err, client.ErrNotFound):
		return ev, RejectNotFound, err.Error()
	case errors.Is(err, client.ErrNotWaiting):
		return ev, RejectNotWaiting, err.Error()
	case errors.Is(err, client.ErrWrongStep):
		return ev, RejectWrongStep, err.Error()
	case errors.Is(err, client.ErrStaleHash):
		return ev, RejectStaleHash, err.Error()
	case errors.Is(err, client.ErrForbidden):
		return ev, RejectForbidden, err.Error()
	}
	// Nothing was decided (the store or NATS failed): the sender may retry
	// with the same id.
	s.events.forget(key)
	return ev, RejectError, err.Error()
}

// admitEvent runs the checks that need no store, on input nobody is
// trusted with yet: the system is known, the signature holds over exactly
// body, the event is well formed, names that system, is within the window
// and was not seen before. It returns the replay key of an admitted event
// (to forget it when the decision fails) or the reason it was rejected.
func (s *Server) admitEvent(system, sig string, body []byte, now time.Time) (ev Event, key, reason, detail string) {
	key, reason, detail = s.admit(system, sig, body, now, &ev, "")
	return ev, key, reason, detail
}

// signedEvent is what admission reads of an event, once decoded.
type signedEvent interface {
	invalid() string
	from() string // the system the body names
	eventID() string
	sentAt() time.Time
}

func (e *Event) from() string      { return e.System }
func (e *Event) eventID() string   { return e.ID }
func (e *Event) sentAt() time.Time { return e.TS }
func (e *Event) invalid() string   { return e.check() }

// admit runs the checks of admitEvent on body, decoded into ev; the replay
// key is keyPrefix, the system and the event's id.
func (s *Server) admit(system, sig string, body []byte, now time.Time, ev signedEvent, keyPrefix string) (key, reason, detail string) {
	sys, ok := s.cfg.EventSecrets[system]
	if !ok {
		return "", RejectUnknownSystem, fmt.Sprintf("no secret for system %q", system)
	}
	if !validSignature(sys.Secret, sig, body) {
		return "", RejectBadSignature, "signature missing or wrong"
	}
	if err := json.Unmarshal(body, ev); err != nil {
		return "", RejectMalformed, err.Error()
	}
	if why := ev.invalid(); why != "" {
		return "", RejectMalformed, why
	}
	if ev.from() != system {
		return "", RejectSystemMismatch, fmt.Sprintf("body names system %q, subject %q", ev.from(), system)
	}
	if age := now.Sub(ev.sentAt()); age > s.events.window {
		return "", RejectStale, fmt.Sprintf("ts %s is %s old", ev.sentAt().Format(time.RFC3339), age.Round(time.Second))
	} else if -age > maxFuture {
		return "", RejectFuture, fmt.Sprintf("ts %s is %s ahead", ev.sentAt().Format(time.RFC3339), (-age).Round(time.Second))
	}
	key = keyPrefix + system + "\x00" + ev.eventID()
	if !s.events.firstSight(key, now) {
		return "", RejectReplayed, "event id seen before"
	}
	return key, "", ""
}

func validSignature(secret, header string, body []byte) bool {
	got, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	mac, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	want := hmac.New(sha256.New, []byte(secret))
	want.Write(body)
	return hmac.Equal(mac, want.Sum(nil))
}

// check says what is missing or wrong in an event, "" when nothing.
func (e Event) check() string {
	switch {
	case e.ID == "" || len(e.ID) > 200:
		return "id must be 1-200 characters"
	case e.System == "":
		return "system is required"
	case queue.ValidateRunID(e.RunID) != nil:
		return fmt.Sprintf("run_id %q is not a run id", e.RunID)
	case e.Step < 1:
		return "step must be the parked step (1 or more)"
	case !sha256RE.MatchString(e.PayloadSHA256):
		return "payload_sha256 must be 64 lowercase hex digits"
	case e.Decision != checkpoint.DecisionApproved && e.Decision != checkpoint.DecisionRejected:
		return fmt.Sprintf("decision %q: want approved or rejected", e.Decision)
	case strings.TrimSpace(e.By) == "" || len(e.By) > 128 || strings.ContainsFunc(e.By, isControl):
		return "by must name who decided (1-128 printable characters)"
	case e.TS.IsZero():
		return "ts is required (RFC3339)"
	}
	return ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// auditRefusal records on the run an event that was signed by a known
// system but refused for what it named (step, hash, group, a run not
// waiting). Unsigned or malformed events are only logged and counted: an
// unauthenticated sender must not be able to write to run records.
func (s *Server) auditRefusal(ctx context.Context, system string, ev Event, reason, detail string) {
	switch reason {
	case RejectForbidden, RejectWrongStep, RejectStaleHash, RejectNotWaiting:
	default:
		return
	}
	err := s.cfg.Client.RecordRefusal(ctx, ev.RunID, checkpoint.AuditEntry{
		Step: ev.Step, By: system + ":" + ev.By, Channel: client.ChannelEvent, Decision: ev.Decision,
		PayloadSHA256: ev.PayloadSHA256, Reason: reason + ": " + detail,
	})
	if err != nil {
		s.log.Warn().Err(err).Str("run_id", ev.RunID).Msg("audit refused event")
	}
}
