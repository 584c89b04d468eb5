package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/service"
)

// cmdSignal is `durable signal RUN NAME [--data JSON] [--id ID] [--by WHO]`.
func cmdSignal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable signal", stderr)
	var c service.Conn
	c.Register(fs)
	data := fs.String("data", "", "the signal's data, JSON (at most 64 KiB)")
	id := fs.String("id", "", "the signal's id: sending the same id again changes nothing (default: a random id)")
	by := fs.String("by", "cli", "who sends the signal (recorded)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return service.Usagef("signal: want RUN and NAME")
	}
	var raw json.RawMessage
	if d := strings.TrimSpace(*data); d != "" {
		var v any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			return service.Usagef("signal: --data is not valid JSON (%v): %s", err, cut(d, 80))
		}
		raw = json.RawMessage(d)
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := cl.Signal(ctx, client.SignalRequest{RunID: pos[0], Name: pos[1], Data: raw, ID: *id, By: *by, Channel: client.ChannelCLI})
	if errors.Is(err, client.ErrBadSignal) || errors.Is(err, client.ErrUnknownSignal) {
		return service.UsageError{Msg: err.Error()}
	}
	if err != nil {
		return missingRun(ctx, cl.Store(), pos[0], err)
	}
	if *asJSON {
		return writeJSON(stdout, map[string]any{"run_id": res.Run.ID, "signal": res.Signal, "resumed": res.Resumed, "duplicate": res.Duplicate, "status": res.Run.Status})
	}
	switch {
	case res.Duplicate:
		fmt.Fprintf(stdout, "signal %s (id %s) was delivered to %s before, at %s; nothing changed\n", res.Signal.Name, res.Signal.ID, res.Run.ID, res.Signal.At.Format("2006-01-02 15:04:05"))
	case res.Resumed:
		fmt.Fprintf(stdout, "signal %s (id %s) delivered to %s; the run was waiting for it and resumes at step %d\n", res.Signal.Name, res.Signal.ID, res.Run.ID, res.Run.Step)
	default:
		fmt.Fprintf(stdout, "signal %s (id %s) delivered to %s and kept until a step waits for it\n", res.Signal.Name, res.Signal.ID, res.Run.ID)
	}
	return nil
}
