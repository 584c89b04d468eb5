// Package natscli tests the "Replay and redrive" recipes of docs/replay.md:
// it runs their exact command lines, with the nats CLI the recipes name and the
// durable CLI, against a live fleet and checks that the replays reached
// the workers and changed nothing. It has no code of its own.
package natscli
