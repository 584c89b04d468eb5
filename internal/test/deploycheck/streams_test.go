package deploycheck

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/pkg/queue"
)

var update = flag.Bool("update", false, "rewrite deploy/nats/streams and deploy/nats/consumers from the code")

// streamReplicas is what the exported files are for: a three-node cluster.
const streamReplicas = 3

// A worker's defaults for the consumers it creates (pkg/worker: AckWait
// 30s, the worker's --ack-wait default, which TestConsumerAckWaitIsWorkerDefault
// checks against the binary; MaxAckPending 0, the server's default 1000).
const (
	workerAckWait       = 30 * time.Second
	workerMaxAckPending = 0
)

// exportedConfigs are the files deploy/nats must hold, by path below it:
// every stream queue.Provision creates, at R3, and the shared consumer
// of every workflow the reference worker registers.
func exportedConfigs(t testing.TB) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, sc := range queue.Streams(queue.Config{Replicas: streamReplicas}) {
		b, err := queue.ConfigJSON(sc)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Join("streams", sc.Name+".json")] = b
	}
	for _, wf := range cli.ReferenceWorkflows().Names() {
		cc := queue.ConsumerConfig(wf, workerAckWait, workerMaxAckPending)
		b, err := queue.ConfigJSON(cc)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Join("consumers", cc.Durable+".json")] = b
	}
	return files
}

// The JSON files in deploy/nats/streams and deploy/nats/consumers are what
// the code declares. After changing a stream or consumer setting, run
// go test ./internal/deploycheck -run TestExportedConfigs -update.
func TestExportedConfigs(t *testing.T) {
	want := exportedConfigs(t)
	dir := deployPath(t, "nats")
	if *update {
		for _, sub := range []string{"streams", "consumers"} {
			old, _ := filepath.Glob(filepath.Join(dir, sub, "*.json"))
			for _, f := range old {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, b := range want {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var have []string
	for _, sub := range []string{"streams", "consumers"} {
		files, _ := filepath.Glob(filepath.Join(dir, sub, "*.json"))
		for _, f := range files {
			rel, _ := filepath.Rel(dir, f)
			have = append(have, rel)
			if _, ok := want[rel]; !ok {
				t.Errorf("deploy/nats/%s: the code declares no such stream or consumer (-update removes it)", rel)
			}
		}
	}
	for name, b := range want {
		if !slices.Contains(have, name) {
			t.Errorf("deploy/nats/%s is missing (go test ./internal/deploycheck -run TestExportedConfigs -update)", name)
			continue
		}
		if got := readFile(t, filepath.Join(dir, name)); !bytes.Equal(got, b) {
			t.Errorf("deploy/nats/%s differs from the code (go test ./internal/deploycheck -run TestExportedConfigs -update):\n got %s\nwant %s", name, got, b)
		}
	}
}

// The files decode strictly into the JetStream API types, with the
// settings that matter for a cluster. TestNATSClusterAcceptsExportedConfigs
// goes further and hands them to the nats CLI.
func TestExportedConfigsDecodeStrictly(t *testing.T) {
	files, _ := filepath.Glob(deployPath(t, "nats", "streams", "*.json"))
	if len(files) == 0 {
		t.Fatal("no files in deploy/nats/streams")
	}
	for _, f := range files {
		var sc jetstream.StreamConfig
		strictJSON(t, f, &sc)
		if sc.Replicas != streamReplicas || sc.Storage != jetstream.FileStorage || sc.Name+".json" != filepath.Base(f) {
			t.Errorf("%s: name %s, %d replicas, storage %s: want %s, %d, file", f, sc.Name, sc.Replicas, sc.Storage, filepath.Base(f), streamReplicas)
		}
	}
	files, _ = filepath.Glob(deployPath(t, "nats", "consumers", "*.json"))
	if len(files) == 0 {
		t.Fatal("no files in deploy/nats/consumers")
	}
	for _, f := range files {
		var cc jetstream.ConsumerConfig
		strictJSON(t, f, &cc)
		if cc.Durable+".json" != filepath.Base(f) || cc.AckPolicy != jetstream.AckExplicitPolicy {
			t.Errorf("%s: durable %s, ack policy %s", f, cc.Durable, cc.AckPolicy)
		}
	}
}

func strictJSON(t testing.TB, path string, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(readFile(t, path)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
