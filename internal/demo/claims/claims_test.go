package claims

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
)

func TestClaimsRoundTripAndRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c := Client{BaseURL: srv.URL}
	ctx := context.Background()
	if _, err := c.Get(ctx, "claim-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown claim: %v", err)
	}
	if cl, err := c.Register(ctx, "claim-1", 1840); err != nil || cl.Amount != 1840 {
		t.Fatalf("register: %+v %v", cl, err)
	}
	// Registering again keeps the first amount (a retried step).
	if cl, err := c.Register(ctx, "claim-1", 999); err != nil || cl.Amount != 1840 {
		t.Fatalf("register again: %+v %v", cl, err)
	}
	if cl, err := c.Set(ctx, "claim-1", 2500); err != nil || cl.Amount != 2500 {
		t.Fatalf("set: %+v %v", cl, err)
	}
	if _, err := c.Set(ctx, "bad.id", 1); err == nil {
		t.Fatal("bad id accepted")
	}
	resp, err := http.Post(srv.URL+"/claim-2", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("empty body: %d", resp.StatusCode)
	}
	again, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.byID["claim-1"].Amount != 2500 {
		t.Fatalf("after restart: %+v", again.byID)
	}
}
