// Package claims is the demo claims system: the source of truth a claim
// workflow re-reads when it resumes. An adjuster (or a test) can edit a
// claim's amount while its run waits for approval; the resumed step then
// presents the new amount and the old approval no longer applies.
//
// Routes, relative to where the handler is mounted (/demo/claims):
//
//	GET  /{id}            {"claim": id, "amount": N}, 404 if unknown
//	POST /{id}            body {"amount": N}: register if absent (idempotent)
//	PUT  /{id}            body {"amount": N}: set the amount
package claims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Claim is a claim record.
type Claim struct {
	ID     string `json:"claim"`
	Amount int64  `json:"amount"`
}

// Server holds claims in memory and in a JSON file rewritten atomically
// on every change, so they survive a restart of `durable dev`.
type Server struct {
	path string
	mu   sync.Mutex
	byID map[string]Claim
}

// Open loads (or creates) the claims file at path.
func Open(path string) (*Server, error) {
	s := &Server{path: path, byID: map[string]Claim{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read claims %s: %w", path, err)
	default:
		if err := json.Unmarshal(b, &s.byID); err != nil {
			return nil, fmt.Errorf("claims file %s is corrupt: %w", path, err)
		}
	}
	return s, nil
}

func (s *Server) save() error {
	b, err := json.Marshal(s.byID)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(s.path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Handler serves the routes of the package comment.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.Trim(r.URL.Path, "/")
		if !checkpoint.ValidID(id) {
			httpError(w, http.StatusNotFound, "unknown claim path "+r.URL.Path)
			return
		}
		switch r.Method {
		case http.MethodGet:
			s.mu.Lock()
			c, ok := s.byID[id]
			s.mu.Unlock()
			if !ok {
				httpError(w, http.StatusNotFound, "no claim "+id)
				return
			}
			writeJSON(w, http.StatusOK, c)
		case http.MethodPost, http.MethodPut:
			amount, ok := readAmount(r.Body)
			if !ok {
				httpError(w, http.StatusBadRequest, `body must be {"amount": N} with N > 0`)
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			c, exists := s.byID[id]
			if r.Method == http.MethodPost && exists {
				writeJSON(w, http.StatusOK, c)
				return
			}
			prev := c
			c = Claim{ID: id, Amount: amount}
			s.byID[id] = c
			if err := s.save(); err != nil {
				if exists {
					s.byID[id] = prev
				} else {
					delete(s.byID, id)
				}
				httpError(w, http.StatusServiceUnavailable, "claims file not written: "+err.Error())
				return
			}
			writeJSON(w, http.StatusOK, c)
		default:
			httpError(w, http.StatusMethodNotAllowed, "GET, POST or PUT")
		}
	})
}

// readAmount decodes a POST or PUT body, {"amount": N} with N > 0, from
// its first 4 KiB.
func readAmount(body io.Reader) (int64, bool) {
	var b struct {
		Amount *int64 `json:"amount"`
	}
	dec := json.NewDecoder(io.LimitReader(body, 4096))
	if err := dec.Decode(&b); err != nil || b.Amount == nil || *b.Amount <= 0 {
		return 0, false
	}
	return *b.Amount, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// ErrNotFound: the claims system has no such claim.
var ErrNotFound = errors.New("claim not found")

// Client talks to the claims system.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

func (c Client) httpc() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// Get reads a claim.
func (c Client) Get(ctx context.Context, id string) (Claim, error) {
	return c.do(ctx, http.MethodGet, id, nil)
}

// Register records a claim's amount unless it is already known, and returns
// the claim as the system holds it.
func (c Client) Register(ctx context.Context, id string, amount int64) (Claim, error) {
	return c.do(ctx, http.MethodPost, id, &amount)
}

// Set changes a claim's amount (an adjuster's edit).
func (c Client) Set(ctx context.Context, id string, amount int64) (Claim, error) {
	return c.do(ctx, http.MethodPut, id, &amount)
}

func (c Client) do(ctx context.Context, method, id string, amount *int64) (Claim, error) {
	var body io.Reader
	if amount != nil {
		b, _ := json.Marshal(map[string]int64{"amount": *amount})
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+"/"+id, body)
	if err != nil {
		return Claim{}, err
	}
	resp, err := c.httpc().Do(req)
	if err != nil {
		return Claim{}, fmt.Errorf("claims %s %s: %w", method, id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return Claim{}, fmt.Errorf("claim %s: %w", id, ErrNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return Claim{}, fmt.Errorf("claims %s %s: HTTP %d: %s", method, id, resp.StatusCode, b)
	}
	var cl Claim
	if err := json.NewDecoder(resp.Body).Decode(&cl); err != nil {
		return Claim{}, fmt.Errorf("claims %s %s: %w", method, id, err)
	}
	return cl, nil
}
