// Package natscli tests the README's "Replay and redrive" recipes: it runs
// their exact command lines, with the nats CLI the README names and the
// durable CLI, against a live fleet and checks that the replays reached
// the workers and changed nothing. It has no code of its own.
package natscli
