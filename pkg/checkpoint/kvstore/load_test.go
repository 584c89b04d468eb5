package kvstore_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Many workers committing at once all land.
func TestManyConcurrentCommits(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, _ := newStore(t, js)
	const runs = 300
	created := make([]checkpoint.Run, runs)
	for i := range runs {
		r, err := s.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprint("load-", i), Status: checkpoint.StatusRunning, Step: 1})
		if err != nil {
			t.Fatal(err)
		}
		created[i] = r
	}
	var wg sync.WaitGroup
	errs := make([]error, runs)
	for i, r := range created {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Step = 2
			_, errs[i] = s.Commit(ctx, r, checkpoint.Checkpoint{Step: 1, State: []byte(`{}`)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("commit %d: %v", i, err)
		}
	}
}
