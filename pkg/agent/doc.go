// Package agent runs an agent loop as a durable workflow: the model decides
// the next step, every model call and every tool call is journaled, tools
// get an idempotency key derived from the run and the step, and the run's
// budget (steps, tokens, spend) is kept in its durable state.
//
// A loop is two workflow steps that alternate. "model" asks the model with
// the conversation so far; its answer is recorded before anything else
// happens, so a resumed step reads the recording and never asks again. If
// the model called tools, each call is one "tool" step: the tool runs with
// the key "<run>:step<n>" and its result is recorded. A tool that needs
// approval parks the run with the exact call (tool, arguments, key) as the
// payload; the approver decides on what will run.
//
// With Config.ParallelTools the calls of one answer run at once instead:
// the tool step fans them out as branches of one fan-out (call i runs with
// the key "<run>:step<n+1>.<i>"), parking first for each gated call in
// turn, and "tool-join" hands the results to the model in call order.
// It changes a run's steps and keys: turn it on with a new Version.
//
// The conversation is append-only and kept out of the checkpoint as it
// grows: tool results above Config.InlineLimit go to the blob store (the
// history keeps a reference and a preview), and once the recent part of the
// history passes Config.TailLimit it is sealed into a blob segment that
// names the segment before it. A checkpoint holds one reference, the tail
// and the counters, whatever the length of the run.
//
//	wf := agent.New(agent.Config{
//		Name: "support", Version: 1, Model: m,
//		System: "You are a support agent.",
//		Tools:  []*agent.Tool{lookupOrder, refund},
//		Budget: agent.Budget{MaxTokens: 200_000, OnReach: agent.Park},
//	})
//	registry.MustRegister(wf)
package agent
