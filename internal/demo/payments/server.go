package payments

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	maxBodyBytes = 64 << 10
	maxKeyBytes  = 255 // what real providers accept; longer keys are usually a bug
)

// Server is the demo payments provider. It is safe for concurrent use.
type Server struct {
	// mu serializes every read and write. Holding it across the fsync is what
	// makes two concurrent first requests with one key produce one payment;
	// the demo's traffic is far too small for that to matter.
	mu    sync.Mutex
	file  *recordFile
	byKey map[string]int // index into list
	list  []Payment      // creation order
	now   func() time.Time
}

// Open loads the records file at path, creating it and its directory if
// needed. Only one Server may own a file at a time.
func Open(path string) (*Server, error) {
	f, recs, err := openRecordFile(path)
	if err != nil {
		return nil, err
	}
	s := &Server{file: f, byKey: map[string]int{}, now: func() time.Time { return time.Now().UTC() }}
	for _, p := range recs {
		i, seen := s.byKey[p.Key]
		if !seen {
			s.byKey[p.Key] = len(s.list)
			s.list = append(s.list, p)
			continue
		}
		if s.list[i].ID != p.ID {
			f.close()
			return nil, fmt.Errorf("payments file %s: key %q recorded as both %s and %s", path, p.Key, s.list[i].ID, p.ID)
		}
		s.list[i] = p
	}
	return s, nil
}

// Close closes the records file; later requests answer 503.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.file.close()
}

// Handler serves POST / (pay) and GET / (list). Mount it with
// http.StripPrefix; both "" and "/" are the root so either prefix form works.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "" && r.URL.Path != "/" {
			writeError(w, http.StatusNotFound, "not_found", "", "no such resource: use POST / to pay or GET / to list")
			return
		}
		switch r.Method {
		case http.MethodPost:
			s.pay(w, r)
		case http.MethodGet, http.MethodHead:
			s.listPayments(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", r.Method+" is not supported: use POST to pay or GET to list")
		}
	})
}

func (s *Server) pay(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	switch {
	case strings.TrimSpace(key) == "":
		writeError(w, http.StatusBadRequest, "missing_idempotency_key", "", "the Idempotency-Key header is required: send a unique key per payment and reuse it on retries")
		return
	case len(key) > maxKeyBytes:
		writeError(w, http.StatusBadRequest, "invalid_idempotency_key", "", fmt.Sprintf("the Idempotency-Key header must be at most %d bytes", maxKeyBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", "", fmt.Sprintf("request body exceeds %d bytes", maxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_body", "", "could not read request body: "+err.Error())
		return
	}
	req, sum, err := parsePayRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_body", "", err.Error())
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.byKey[key]; ok {
		orig := s.list[i]
		if orig.BodySHA256 != sum {
			writeError(w, http.StatusUnprocessableEntity, "idempotency_conflict", key, fmt.Sprintf(
				"Idempotency-Key %q was already used with a different request body: the body differs from the original request (%s); send the original body or use a new key", key, orig.ID))
			return
		}
		orig.Requests++
		if err := s.file.append(orig); err != nil {
			writeStoreError(w, err)
			return
		}
		s.list[i] = orig
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, orig)
		return
	}
	p := Payment{
		ID:         fmt.Sprintf("pay_%06d", len(s.list)+1),
		Key:        key,
		Amount:     req.Amount,
		Currency:   req.Currency,
		RunID:      req.RunID,
		Claim:      req.Claim,
		Payee:      req.Payee,
		BodySHA256: sum,
		CreatedAt:  s.now(),
		Requests:   1,
	}
	if err := s.file.append(p); err != nil {
		writeStoreError(w, err)
		return
	}
	s.byKey[key] = len(s.list)
	s.list = append(s.list, p)
	writeJSON(w, http.StatusCreated, p)
}

// parsePayRequest validates body and returns the hex SHA-256 of its canonical
// form: decoded and re-marshalled, so whitespace and key order are not a
// different request but every value, unknown fields included, is.
func parsePayRequest(body []byte) (PayRequest, string, error) {
	var req PayRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // keep numbers as written; float64 would round large ones
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return req, "", errors.New("request body is empty: send a JSON object with amount, currency, run_id, claim and payee")
		}
		return req, "", fmt.Errorf("request body is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, "", errors.New("request body has data after the JSON object: send exactly one object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return req, "", errors.New("request body must be a JSON object")
	}
	if obj["amount"] == nil {
		return req, "", errors.New("amount is required: a positive integer")
	}
	n, ok := obj["amount"].(json.Number)
	if !ok {
		return req, "", errors.New("amount must be a number, not a string or other JSON value")
	}
	a, err := n.Int64()
	if err != nil {
		return req, "", fmt.Errorf("amount must be a positive integer, got %s", n)
	}
	if a <= 0 {
		return req, "", fmt.Errorf("amount must be greater than 0, got %d", a)
	}
	req.Amount = a
	for name, dst := range map[string]*string{"run_id": &req.RunID, "claim": &req.Claim, "currency": &req.Currency, "payee": &req.Payee} {
		switch x := obj[name].(type) {
		case nil:
		case string:
			*dst = x
		default:
			return req, "", fmt.Errorf("%s must be a string", name)
		}
	}
	canon, err := json.Marshal(obj)
	if err != nil {
		return req, "", fmt.Errorf("canonicalize request body: %v", err)
	}
	h := sha256.Sum256(canon)
	return req, hex.EncodeToString(h[:]), nil
}

func (s *Server) listPayments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key, runID := q.Get("key"), q.Get("run_id")
	s.mu.Lock()
	out := List{Payments: []Payment{}} // [] not null, for jq and JS callers
	for _, p := range s.list {
		if (key == "" || p.Key == key) && (runID == "" || p.RunID == runID) {
			out.Payments = append(out.Payments, p)
			out.Total += p.Amount
		}
	}
	s.mu.Unlock()
	out.Count = len(out.Payments)
	writeJSON(w, http.StatusOK, out)
}

func writeStoreError(w http.ResponseWriter, err error) {
	// 503, not 500: the caller cannot know whether the record reached disk,
	// and retrying with the same key is exactly right once the server is back.
	writeError(w, http.StatusServiceUnavailable, "unavailable", "", "payment store unavailable, retry with the same Idempotency-Key: "+err.Error())
}

func writeError(w http.ResponseWriter, status int, code, key, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code, Key: key})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}
