package queue

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// FuzzDecodeStep: no step message panics a worker, and whatever decodes
// is valid, matches its subject and survives a publish unchanged.
func FuzzDecodeStep(f *testing.F) {
	f.Add("durable.step.claim.claim-0042", []byte(`{"run_id":"claim-0042","workflow":"claim","step":7}`))
	f.Add("", []byte(`{"run_id":"claim-0042","workflow":"claim","step":1,"name":"pay","extra":[1]}`))
	f.Add("durable.step.claim.claim-0043", []byte(`{"run_id":"claim-0042","workflow":"claim","step":7}`))
	f.Add("", []byte(`{"RUN_ID":"r","Workflow":"w","STEP":2}`))
	f.Add("", []byte(`{"run_id":"a.b","workflow":"claim","step":1}`))
	f.Add("", []byte(`{"run_id":"r","workflow":"claim.*","step":1}`))
	f.Add("", []byte(`{"run_id":"r","workflow":"claim","step":0}`))
	f.Add("", []byte(`{"step":1e400}`))
	f.Add("", []byte(`null`))
	f.Add("x", []byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		m, err := DecodeStep(subject, body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if ValidateRunID(m.RunID) != nil || m.Step < 1 || !checkpoint.ValidID(m.Workflow) {
			t.Fatalf("accepted invalid message %+v", m)
		}
		if subject != "" && subject != StepSubject(m.Workflow, m.RunID) {
			t.Fatalf("accepted %+v on subject %s", m, subject)
		}
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeStep(StepSubject(m.Workflow, m.RunID), data)
		if err != nil || again != m {
			t.Fatalf("%+v published as %s decodes to %+v (%v)", m, data, again, err)
		}
	})
}
