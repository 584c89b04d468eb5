package redisstore

import (
	"slices"
	"testing"
)

// A commit's keys are the ones every other operation spells for the run.
func TestCommitKeysAreTheRunsKeys(t *testing.T) {
	s := New(nil, Options{Prefix: "p"})
	want := append([]string{s.runKey("r-1"), s.cpKey("r-1", 7)}, s.spillKeys("r-1")...)
	if got := s.commitKeys("r-1", 7); !slices.Equal(got, want) {
		t.Fatalf("commitKeys = %q, want %q", got, want)
	}
}
