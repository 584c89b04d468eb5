package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/faults"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/model/anthropic"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// The test binary doubles as a worker process, so that the crash test
// kills a real process (SIGKILL: no deferred functions, no flush).
const (
	envChild     = "DURABLE_AGENT_TEST_CHILD" // "worker" selects the child role
	envNATS      = "DURABLE_AGENT_TEST_NATS"
	envRedis     = "DURABLE_AGENT_TEST_REDIS"
	envPrefix    = "DURABLE_AGENT_TEST_PREFIX"
	envModelURL  = "DURABLE_AGENT_TEST_MODEL_URL"
	envToolLog   = "DURABLE_AGENT_TEST_TOOL_LOG"
	envCrashSpec = "DURABLE_AGENT_TEST_CRASH"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "worker" {
		if err := runCrashWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// nats.go v1.55 jetstream: the reconnect watcher of an async publisher
		// (Object Store puts) can start on a nil status channel and block forever.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// The embedded nats-server and go-redis keep background goroutines
		// that end shortly after their owners are closed.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// crashTools are the tools the fake model picks among at random.
var crashTools = []string{"lookup_a", "lookup_b", "lookup_c"}

const (
	crashWorkflow = "crash-agent"
	crashRun      = "agent-crash-1"
	crashModel    = "claude-fake-1"
)

// toolRun is one line of the tools' side channel: a tool that ran.
type toolRun struct {
	PID   int    `json:"pid"`
	Tool  string `json:"tool"`
	Key   string `json:"key"`
	Nonce string `json:"nonce"`
}

// crashAgent is the agent the worker processes run: the real Anthropic
// adapter and three tools that append what they ran to logPath.
func crashAgent(m model.Model, logPath string) *steps.Workflow[agent.State] {
	var tools []*agent.Tool
	for _, name := range crashTools {
		tools = append(tools, agent.NewTool(name, "Look something up ("+name+").",
			`{"type":"object","properties":{"nonce":{"type":"string"}},"required":["nonce"]}`,
			func(_ context.Context, key agent.Key, args struct {
				Nonce string `json:"nonce"`
			}) (string, error) {
				line, err := json.Marshal(toolRun{PID: os.Getpid(), Tool: name, Key: string(key), Nonce: args.Nonce})
				if err != nil {
					return "", err
				}
				f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return "", err
				}
				if _, err := f.Write(append(line, '\n')); err != nil {
					_ = f.Close()
					return "", err
				}
				if err := f.Close(); err != nil {
					return "", err
				}
				return toolOutput(name, args.Nonce, string(key)), nil
			}))
	}
	return agent.New(agent.Config{Name: crashWorkflow, Version: 1, Model: m, ModelName: crashModel, Tools: tools, MaxTokens: 256})
}

func toolOutput(tool, nonce, key string) string {
	return fmt.Sprintf("%s ran with nonce %s under %s", tool, nonce, key)
}

// runCrashWorker is the child process: a worker on the parent's NATS and
// redis-server, its model the Anthropic adapter on the parent's fake API.
func runCrashWorker() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nc, err := nats.Connect(os.Getenv(envNATS))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	opt, err := redis.ParseURL(os.Getenv(envRedis))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	store := redisstore.New(rdb, redisstore.Options{Prefix: os.Getenv(envPrefix)})
	// Blobs through NATS, shared by both worker processes.
	blobs, err := objstore.New(ctx, js, objstore.Options{})
	if err != nil {
		return err
	}
	m, err := anthropic.New(model.Config{APIKey: "sk-ant-fake", Model: crashModel, BaseURL: os.Getenv(envModelURL)})
	if err != nil {
		return err
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Int("pid", os.Getpid()).Logger().Level(zerolog.InfoLevel)
	hooks, err := faults.Hooks(os.Getenv(envCrashSpec))
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		JetStream: js, Store: store, Registry: steps.NewRegistry().MustRegister(crashAgent(m, os.Getenv(envToolLog))),
		Concurrency: 4, AckWait: 2 * time.Second, DrainTimeout: 2 * time.Second,
		Logger: &log, Hooks: hooks, Blobs: blobs,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// servedCall is what the fake Anthropic API answered to one request.
type servedCall struct {
	Turn int // 1: chose a tool; 2: answered with the tool's result
	// Turn 1: the tool call it chose.
	Tool, CallID, Nonce string
	// Turn 2: the tool_result it was sent.
	ResultID, Result string
	Answer           string
}

// fakeAnthropic is a Messages API that counts its calls and is not
// deterministic: a first turn calls a tool chosen at random with a random
// nonce, so a model asked twice for one step would take the run elsewhere.
type fakeAnthropic struct {
	URL    string
	mu     sync.Mutex
	served []servedCall
	bad    []string // requests it could not answer
}

func startFakeAnthropic(t *testing.T) *fakeAnthropic {
	t.Helper()
	f := &fakeAnthropic{}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeAnthropic) calls() []servedCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]servedCall(nil), f.served...)
}

func (f *fakeAnthropic) refuse(w http.ResponseWriter, why string) {
	f.mu.Lock()
	f.bad = append(f.bad, why)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, why)
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// text of a tool_result's content: a string or text blocks.
func (b block) text() string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []block
	_ = json.Unmarshal(b.Content, &parts)
	var out strings.Builder
	for _, p := range parts {
		out.WriteString(p.Text)
	}
	return out.String()
}

func (f *fakeAnthropic) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		f.refuse(w, r.Method+" "+r.URL.Path)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string  `json:"role"`
			Content []block `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		f.refuse(w, "decode request: "+err.Error())
		return
	}
	if req.Model != crashModel || len(req.Messages) == 0 || len(req.Tools) != len(crashTools) {
		f.refuse(w, fmt.Sprintf("model %q, %d messages, %d tools", req.Model, len(req.Messages), len(req.Tools)))
		return
	}
	var result *block
	last := req.Messages[len(req.Messages)-1]
	for i, b := range last.Content {
		if b.Type == "tool_result" {
			result = &last.Content[i]
		}
	}
	var call servedCall
	var content []map[string]any
	stop := "end_turn"
	if result == nil {
		call = servedCall{Turn: 1, Tool: crashTools[rand.IntN(len(crashTools))], Nonce: fmt.Sprintf("%016x", rand.Uint64())}
		call.CallID = "toolu_" + call.Nonce
		content = []map[string]any{
			{"type": "text", "text": "Let me look that up."},
			{"type": "tool_use", "id": call.CallID, "name": call.Tool, "input": map[string]string{"nonce": call.Nonce}},
		}
		stop = "tool_use"
	} else {
		call = servedCall{Turn: 2, ResultID: result.ToolUseID, Result: result.text()}
		call.Answer = "done: " + call.Result
		content = []map[string]any{{"type": "text", "text": call.Answer}}
	}
	body, err := json.Marshal(map[string]any{
		"id": fmt.Sprintf("msg_%016x", rand.Uint64()), "type": "message", "role": "assistant",
		"model": crashModel, "content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 100, "output_tokens": 20},
	})
	if err != nil {
		f.refuse(w, err.Error())
		return
	}
	// Counted before answering: the worker records the call only after
	// reading this answer.
	f.mu.Lock()
	f.served = append(f.served, call)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// child is a worker process started from the test binary.
type child struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once cmd.Wait returned
	err  error         // cmd.Wait's error, set before done closes
}

type crashEnv struct {
	nats, redis, prefix, modelURL, toolLog, dir string
}

func (e crashEnv) startWorker(t *testing.T, name, crash string) *child {
	t.Helper()
	c := &child{log: filepath.Join(e.dir, name+".log"), done: make(chan struct{})}
	out, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.Env = append(os.Environ(), envChild+"=worker", envNATS+"="+e.nats, envRedis+"="+e.redis, envPrefix+"="+e.prefix,
		envModelURL+"="+e.modelURL, envToolLog+"="+e.toolLog, envCrashSpec+"="+crash)
	if err := c.cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		_ = out.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill() // fails harmlessly once the process has exited
		<-c.done
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("%s (pid %d) log:\n%s", name, c.cmd.Process.Pid, b)
		}
	})
	return c
}

// wait waits for the process to exit and returns its status.
func (c *child) wait(t *testing.T, timeout time.Duration) syscall.WaitStatus {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Fatalf("worker pid %d still running after %s", c.cmd.Process.Pid, timeout)
	}
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		t.Fatalf("no wait status for pid %d (%v)", c.cmd.Process.Pid, c.err)
	}
	return ws
}

// readToolLog returns the tool runs of the side channel, in order.
func readToolLog(t *testing.T, path string) []toolRun {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var runs []toolRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r toolRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("tool log line %q: %v", sc.Text(), err)
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return runs
}

// decodeRecorded reads a journaled model call.
func decodeRecorded(t *testing.T, rec checkpoint.CallRecord) model.Recorded {
	t.Helper()
	var r model.Recorded
	if err := json.Unmarshal(rec.Result, &r); err != nil {
		t.Fatalf("journaled call %s: %v", rec.Name, err)
	}
	return r
}

// chose asserts that resp is the tool call the fake model answered first.
func chose(t *testing.T, where string, calls []model.ToolCall, first servedCall) {
	t.Helper()
	if len(calls) != 1 {
		t.Fatalf("%s: %d tool calls, want 1 (%s)", where, len(calls), first.Tool)
	}
	var args struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal(calls[0].Args, &args); err != nil {
		t.Fatalf("%s: args %s: %v", where, calls[0].Args, err)
	}
	if calls[0].Name != first.Tool || calls[0].ID != first.CallID || args.Nonce != first.Nonce {
		t.Fatalf("%s: call %s %s %s, want the first answer's %s %s nonce %s", where, calls[0].Name, calls[0].ID, calls[0].Args, first.Tool, first.CallID, first.Nonce)
	}
}

// A worker process is SIGKILLed after the model call of step 1 is
// journaled and before step 1's checkpoint; a second process resumes the
// run. The model, which chooses a tool at random, is not asked again: the
// run goes on with the tool and arguments of the recorded answer.
func TestCrashAfterModelCall(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: runs worker processes, nats-server and redis-server")
	}
	ns := testenv.StartNATS(t)
	_, js := ns.Connect(t)
	rs := testenv.StartRedis(t)
	opt, err := redis.ParseURL(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	const prefix = "agentcrash"
	store := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	fake := startFakeAnthropic(t)
	dir := t.TempDir()
	env := crashEnv{nats: ns.URL, redis: rs.URL, prefix: prefix, modelURL: fake.URL, toolLog: filepath.Join(dir, "tools.jsonl"), dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// 1. Worker 1 makes the first model call and dies right after it is
	// journaled, before the checkpoint.
	w1 := env.startWorker(t, "worker-1", crashRun+":1:after-record")
	testenv.Eventually(t, 20*time.Second, "the agent workflow registered", func() bool {
		infos, err := store.Workflows(ctx)
		return err == nil && len(infos) == 1
	})
	if _, _, err := client.New(js, store).Start(ctx, client.StartRequest{Workflow: crashWorkflow, RunID: crashRun, Input: []byte(`{"message": "look something up"}`)}); err != nil {
		t.Fatal(err)
	}
	ws := w1.wait(t, 20*time.Second)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("worker 1 exited with %v (%v), want killed by SIGKILL", ws, w1.err)
	}
	if log, _ := os.ReadFile(w1.log); !strings.Contains(string(log), "durable-fault: crash run="+crashRun+" step=1 point=after-record") {
		t.Fatalf("worker 1 was killed, but not by the after-record fault:\n%s", log)
	}
	served := fake.calls()
	if len(served) != 1 || served[0].Turn != 1 {
		t.Fatalf("before the crash the model served %+v, want one first-turn call", served)
	}
	first := served[0]
	t.Logf("the model chose %s with nonce %s", first.Tool, first.Nonce)
	snap, err := store.Load(ctx, crashRun, checkpoint.AtStep(1))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Current != nil || len(snap.Journal) != 1 || snap.Journal[0].Name != agent.StepModel {
		t.Fatalf("after the crash: checkpoint 1 %v, journal %+v; want no checkpoint and the model call journaled", snap.Current != nil, snap.Journal)
	}
	chose(t, "the journal after the crash", decodeRecorded(t, snap.Journal[0]).Response.ToolCalls, first)
	if runs := readToolLog(t, env.toolLog); len(runs) != 0 {
		t.Fatalf("tools ran before the resume: %+v", runs)
	}

	// 2. Worker 2 gets step 1 again once its ack wait runs out and
	// finishes the run.
	w2 := env.startWorker(t, "worker-2", "")
	testenv.Eventually(t, 20*time.Second, crashRun+" completed", func() bool {
		run, err := store.GetRun(ctx, crashRun)
		return err == nil && run.Status == checkpoint.StatusCompleted
	})
	if err := w2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := w2.wait(t, 15*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("worker 2 exited with %v (%v) after SIGTERM, want a drained exit 0", ws, w2.err)
	}

	// The model served two calls: the first turn once (not again on the
	// resume), then the answer to the tool's result.
	served = fake.calls()
	fake.mu.Lock()
	bad := append([]string(nil), fake.bad...)
	fake.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("the fake model refused requests: %q", bad)
	}
	if len(served) != 2 || served[0] != first || served[1].Turn != 2 {
		t.Fatalf("the model served %+v, want the first turn once then the second", served)
	}
	key := crashRun + ":step2"
	want := toolOutput(first.Tool, first.Nonce, key)
	if served[1].ResultID != first.CallID || served[1].Result != want {
		t.Fatalf("the model was sent the result %s %q, want %s %q", served[1].ResultID, served[1].Result, first.CallID, want)
	}

	// The tool of the recorded answer ran once, with its arguments, in
	// worker 2, under the step's key.
	runs := readToolLog(t, env.toolLog)
	if len(runs) != 1 || runs[0] != (toolRun{PID: w2.cmd.Process.Pid, Tool: first.Tool, Key: key, Nonce: first.Nonce}) {
		t.Fatalf("tools ran %+v, want %s once with nonce %s under %s in worker 2 (pid %d)", runs, first.Tool, first.Nonce, key, w2.cmd.Process.Pid)
	}

	// Checkpoints: step 1 committed by the second delivery from the
	// journal (Replayed), steps 2 and 3 by their first.
	cps, err := store.Checkpoints(ctx, crashRun)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 3 {
		t.Fatalf("%d checkpoints, want 3 (model, tool, model)", len(cps))
	}
	type wantCP struct {
		name, call string
		attempt    int
		replayed   bool
	}
	for i, w := range []wantCP{
		{agent.StepModel, "model", 2, true},
		{agent.StepTool, "tool:" + first.Tool, 1, false},
		{agent.StepModel, "model", 1, false},
	} {
		cp := cps[i]
		if cp.Step != i+1 || cp.Name != w.name || cp.Attempt != w.attempt || len(cp.Journal) != 1 || cp.Journal[0].Name != w.call || cp.Journal[0].Replayed != w.replayed {
			t.Errorf("checkpoint %d: %s attempt %d journal %+v; want %s attempt %d with call %s replayed=%t",
				cp.Step, cp.Name, cp.Attempt, cp.Journal, w.name, w.attempt, w.call, w.replayed)
		}
	}
	chose(t, "checkpoint 1's journal", decodeRecorded(t, cps[0].Journal[0]).Response.ToolCalls, first)
	if note := cps[1].Journal[0].Note; !strings.Contains(note, first.Tool+" key "+key) {
		t.Errorf("checkpoint 2's call note %q, want it to name %s and %s", note, first.Tool, key)
	}

	st := stateOf(t, cps[2])
	if st.Answer != "done: "+want || st.Usage.ModelCalls != 2 || st.Usage.ToolCalls != 1 || st.Usage.InputTokens != 200 {
		t.Fatalf("answer %q, usage %+v; want %q after 2 model calls and 1 tool call", st.Answer, st.Usage, "done: "+want)
	}
	if len(st.History.Tail) != 4 {
		t.Fatalf("history of %d entries, want 4 (prompt, call, result, answer)", len(st.History.Tail))
	}
	chose(t, "the history", st.History.Tail[1].ToolCalls, first)
	if r := st.History.Tail[2].Results; len(r) != 1 || r[0].CallID != first.CallID || r[0].Tool != first.Tool || r[0].Content != want {
		t.Fatalf("history holds the result %+v, want %s's", r, first.Tool)
	}
}
