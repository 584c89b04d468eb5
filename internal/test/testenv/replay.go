package testenv

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/queue"
)

// RepublishSteps publishes a copy of every stored step message with a
// fresh message id, as an operator replaying with the nats CLI would, and
// returns how many. No stored message fails the test: a replay of nothing
// proves nothing.
func RepublishSteps(tb testing.TB, js jetstream.JetStream) int {
	tb.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, queue.StepStream)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			tb.Fatal(err)
		}
		msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("replay-%d", seq))
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	if n == 0 {
		tb.Fatal("no step messages to replay")
	}
	return n
}
