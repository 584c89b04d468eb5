package queue

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateRunID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"claim-0042", true}, {"a_b-C9", true}, {strings.Repeat("x", 128), true},
		{"", false}, {"a.b", false}, {"a b", false}, {"a*", false}, {"a>", false},
		{"ünï", false}, {strings.Repeat("x", 129), false}, {"a/b", false}, {"{a}", false},
	} {
		err := ValidateRunID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateRunID(%q) = %v, want ok=%t", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadID) {
			t.Errorf("ValidateRunID(%q) error %v does not wrap ErrBadID", tc.id, err)
		}
	}
}

func TestDecodeStep(t *testing.T) {
	good := `{"run_id":"claim-0042","workflow":"claim","step":7,"name":"notify"}`
	for _, tc := range []struct {
		name, subject, body string
		ok                  bool
	}{
		{"valid", "durable.step.claim.claim-0042", good, true},
		{"no subject check", "", good, true},
		{"not json", "durable.step.claim.x", "garbage", false},
		{"bad run id", "", `{"run_id":"a.b","workflow":"claim","step":1}`, false},
		{"bad workflow", "", `{"run_id":"a","workflow":"c.d","step":1}`, false},
		{"step zero", "", `{"run_id":"a","workflow":"claim","step":0}`, false},
		{"negative step", "", `{"run_id":"a","workflow":"claim","step":-3}`, false},
		{"subject mismatch", "durable.step.claim.other", good, false},
		{"workflow mismatch", "durable.step.other.claim-0042", good, false},
		{"empty object", "", `{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := DecodeStep(tc.subject, []byte(tc.body))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%t", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if tc.ok && (m.RunID != "claim-0042" || m.Step != 7 || m.Workflow != "claim") {
				t.Fatalf("decoded %+v", m)
			}
		})
	}
}

func TestSubjectsAndIDs(t *testing.T) {
	if got := StepSubject("claim", "claim-0042"); got != "durable.step.claim.claim-0042" {
		t.Errorf("StepSubject = %s", got)
	}
	if got := MsgID("claim-0042", 7); got != "claim-0042:7" {
		t.Errorf("MsgID = %s", got)
	}
	if got := DLQSubject("claim", "r"); got != "durable.dlq.claim.r" {
		t.Errorf("DLQSubject = %s", got)
	}
	if got := StepFilter("claim"); got != "durable.step.claim.*" {
		t.Errorf("StepFilter = %s", got)
	}
}
