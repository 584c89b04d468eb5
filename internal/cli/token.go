package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/service"
)

// cmdToken is `durable token create --file FILE --id WHO --groups G1,G2`:
// it adds the hash of a new token to FILE and prints the token, once, on
// stdout (and nothing else there, so scripts can capture it).
func cmdToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return service.Usagef("token: want `durable token create --file FILE --id WHO --groups G1,G2`")
	}
	fs := service.NewFlagSet("durable token create", stderr)
	file := fs.String("file", "", "token file the approver reads with --tokens (created 0600 when missing; required)")
	id := fs.String("id", "", "identity the token stands for, recorded with every decision (required)")
	groups := fs.String("groups", "", "comma-separated groups whose approvals the token may decide (required)")
	pos, err := service.ParseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("token create: unexpected argument %q", pos[0])
	}
	if *file == "" || strings.TrimSpace(*id) == "" || strings.TrimSpace(*groups) == "" {
		return service.Usagef("token create: --file FILE, --id WHO and --groups G1,G2 are required")
	}
	tok, err := tokens.Create(*file, *id, strings.Split(*groups, ","))
	if errors.Is(err, tokens.ErrInvalid) {
		return service.UsageError{Msg: "token create: " + err.Error()}
	}
	if err != nil {
		return fmt.Errorf("token create: %w", err)
	}
	fmt.Fprintln(stdout, tok)
	fmt.Fprintf(stderr, "added a token for %s (groups %s) to %s; it is shown only this once: hand it to %s securely\n", strings.TrimSpace(*id), *groups, *file, strings.TrimSpace(*id))
	return nil
}
