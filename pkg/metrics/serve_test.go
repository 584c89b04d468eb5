package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// /healthz is liveness only; /readyz fails, naming the check, while a
// dependency is down, and passes again once it is back.
func TestReadinessChecks(t *testing.T) {
	m := New()
	srv := httptest.NewServer(Mux(m))
	defer srv.Close()
	get := func(path string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode, body
	}
	if code, body := get("/readyz"); code != 200 || body["ok"] != true {
		t.Fatalf("no checks: %d %v", code, body)
	}
	natsDown := errors.New("nats: disconnected")
	var down error = natsDown
	m.Ready(map[string]func(context.Context) error{
		"nats":  func(context.Context) error { return down },
		"store": func(context.Context) error { return nil },
	})
	code, body := get("/readyz")
	failed, _ := body["failed"].(map[string]any)
	if code != http.StatusServiceUnavailable || body["ok"] != false || failed["nats"] != "nats: disconnected" || len(failed) != 1 {
		t.Fatalf("nats down: %d %v", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d while a dependency is down: liveness must not depend on it", code)
	}
	down = nil
	if code, body := get("/readyz"); code != 200 || body["ok"] != true {
		t.Fatalf("nats back: %d %v", code, body)
	}
	// A new set replaces the old one: the failing store check is gone.
	m.Ready(map[string]func(context.Context) error{"store": func(context.Context) error { return errors.New("down") }})
	m.Ready(map[string]func(context.Context) error{"nats": func(context.Context) error { return nil }})
	if code, body := get("/readyz"); code != 200 || body["ok"] != true {
		t.Fatalf("after replacing the checks: %d %v", code, body)
	}
}
