package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
)

// sources is the web the research agent reads: each request's path and
// Idempotency-Key, and /slow, which hangs until released.
type sources struct {
	mu      sync.Mutex
	keys    map[string][]string // path -> keys of its requests
	slowHit chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *sources) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.keys[r.URL.Path] = append(s.keys[r.URL.Path], r.Header.Get("Idempotency-Key"))
	s.mu.Unlock()
	if r.URL.Path == "/slow" {
		s.once.Do(func() { close(s.slowHit) })
		select {
		case <-s.release:
		case <-time.After(20 * time.Second):
		}
	}
	fmt.Fprintf(w, "page %s has five words", r.URL.Path)
}

func (s *sources) requests(path string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys[path]...)
}

// The research example against `durable dev`: input checked by its
// schema at start; a SIGKILL of the worker while the fan-out's branches
// fetch; each source asked only with its branch's key; a child run
// summarizes; the "reviewed" signal sent by the CLI for one run and by the
// approver's HTTP API for another.
func TestResearchExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example module and runs it against durable dev")
	}
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET"} {
		t.Setenv(k, "")
	}
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	bin := buildExample(t, "research")
	web := &sources{keys: map[string][]string{}, slowHit: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(web)
	defer srv.Close()
	defer func() {
		select {
		case <-web.release:
		default:
			close(web.release)
		}
	}()
	natsPort, httpPort := freePort(t), freePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	data := filepath.Join(t.TempDir(), "data")
	devUp(t, httpAddr, "--data", data, "--nats-port", fmt.Sprint(natsPort), "--http", httpAddr, "--workers", "0")
	cliAt := func(a ...string) result { return runCLI(append(a, "--nats", natsURL)...) }
	show := func(id string) map[string]any {
		var v map[string]any
		_ = json.Unmarshal([]byte(cliAt("runs", "show", id, "--json").stdout), &v)
		return v
	}
	workerLog := &testenv.Buffer{}
	startWorker := func() *exec.Cmd { return startExampleWorker(t, bin, natsURL, workerLog) }
	first := startWorker()
	// Until the worker registered the workflow, a start says it is unknown.
	testenv.Eventually(t, 20*time.Second, "research registered", func() bool {
		return !strings.Contains(cliAt("start", "research", "--id", "bad-0", "--input", `{}`).stderr, "unknown workflow")
	})

	// A bad input is refused at start with every violation; no run exists.
	for _, tc := range []struct{ id, input string }{
		{"bad-1", `{"topic": "x", "sources": [1, 2]}`},
		{"bad-2", `{"topic": "x", "sources": []}`},
	} {
		r := cliAt("start", "research", "--id", tc.id, "--input", tc.input)
		if r.code != 2 || !strings.Contains(r.stderr, "/sources") {
			t.Errorf("start %s: %s, want exit 2 naming /sources", tc.input, r)
		}
		if tc.id == "bad-1" && (!strings.Contains(r.stderr, "/sources/0") || !strings.Contains(r.stderr, "/sources/1")) {
			t.Errorf("start %s lists not every violation: %s", tc.input, r.stderr)
		}
		if r := cliAt("runs", "show", tc.id); r.code == 0 {
			t.Errorf("a refused start created run %s: %s", tc.id, r)
		}
	}

	input := fmt.Sprintf(`{"topic": "durable execution", "sources": [%q, %q, %q]}`, srv.URL+"/a", srv.URL+"/slow", srv.URL+"/c")
	if r := cliAt("start", "research", "--id", "res-1", "--input", input); r.code != 0 {
		t.Fatalf("start res-1: %s", r)
	}
	select {
	case <-web.slowHit: // the fan-out is fetching
	case <-time.After(30 * time.Second):
		t.Fatalf("the slow source was never fetched\nworker log:\n%s", workerLog)
	}
	if err := first.Process.Kill(); err != nil { // SIGKILL in the fan-out
		t.Fatal(err)
	}
	_ = first.Wait()
	close(web.release)
	startWorker()
	testenv.Eventually(t, 60*time.Second, "res-1 waits for its review", func() bool {
		v := show("res-1")
		return v["status"] == "waiting" && v["step_name"] == "review"
	})
	for i, path := range []string{"/a", "/slow", "/c"} {
		keys := web.requests(path)
		want := fmt.Sprintf("res-1:step2.%d", i+1)
		if len(keys) == 0 {
			t.Errorf("%s was never fetched", path)
		}
		for _, k := range keys {
			if k != want {
				t.Errorf("%s fetched with key %q, want %q (all: %q)", path, k, want, keys)
			}
		}
	}
	if v := show("res-1-s3-1"); v["status"] != "completed" || v["workflow"] != "summarize" {
		t.Errorf("the summarize child: %v", v)
	}
	if r := cliAt("signal", "res-1", "reviewed", "--data", `{"ok": true}`, "--by", "ana"); r.code != 0 {
		t.Fatalf("signal res-1: %s", r)
	}
	testenv.Eventually(t, 30*time.Second, "res-1 completed", func() bool { return show("res-1")["status"] == "completed" })
	if r := cliAt("runs", "show", "res-1", "--json"); !strings.Contains(r.stdout, "durable execution: 3 sources, 15 words") {
		t.Errorf("res-1's state lacks the child's summary:\n%s", r.stdout)
	}

	// The same signal through the approver's HTTP API, with the dev token.
	one := fmt.Sprintf(`{"topic": "t", "sources": [%q]}`, srv.URL+"/a")
	if r := cliAt("start", "research", "--id", "res-2", "--input", one); r.code != 0 {
		t.Fatalf("start res-2: %s", r)
	}
	testenv.Eventually(t, 60*time.Second, "res-2 waits for its review", func() bool { return show("res-2")["step_name"] == "review" })
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/api/runs/res-2/signals/reviewed", bytes.NewReader([]byte(`{"data": {"ok": true}}`)))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST the signal: %s", resp.Status)
	}
	testenv.Eventually(t, 30*time.Second, "res-2 completed", func() bool { return show("res-2")["status"] == "completed" })
}
