package payments

import (
	"errors"
	"fmt"
	"time"
)

// PayRequest is the body of POST /. Amount is an integer because float
// money does not round-trip; its unit is the currency's, as the demo uses it.
type PayRequest struct {
	RunID    string `json:"run_id"`
	Claim    string `json:"claim"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Payee    string `json:"payee"`
}

// Payment is one recorded payment, as answered by POST / and listed by GET /.
type Payment struct {
	ID       string `json:"id"` // pay_000001, in creation order
	Key      string `json:"key"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	RunID    string `json:"run_id"`
	Claim    string `json:"claim,omitempty"`
	Payee    string `json:"payee"`
	// BodySHA256 is the hex SHA-256 of the canonical request body; a later
	// request with the same key must match it to be a replay.
	BodySHA256 string    `json:"body_sha256"`
	CreatedAt  time.Time `json:"created_at"`
	// Requests counts how often the key was presented with the matching body,
	// the first time included, so tests can see retries reach the provider.
	Requests int `json:"requests"`
}

// List is the body of GET /.
type List struct {
	Payments []Payment `json:"payments"`
	Count    int       `json:"count"`
	Total    int64     `json:"total"` // sum of Amount over Payments
}

// ErrConflict matches a *ConflictError with errors.Is.
var ErrConflict = errors.New("idempotency key reused with a different body")

// ConflictError is the provider's 422: the key was already used for a
// different request. Retrying cannot succeed; the caller needs a new key or
// the original body.
type ConflictError struct {
	Key     string
	Message string // the provider's explanation
}

func (e *ConflictError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("idempotency key %q was already used with a different request body", e.Key)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// StatusError is any other non-2xx answer. Body is the provider's answer,
// truncated, so the caller can show what was wrong.
type StatusError struct {
	StatusCode int
	Body       string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("payments API answered %d: %s", e.StatusCode, e.Body)
}

// errorBody is the JSON shape of every error the server answers.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Key   string `json:"key,omitempty"`
}
