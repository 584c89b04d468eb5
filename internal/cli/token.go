package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/service"
)

const tokenUsage = "token: want `durable token create --file FILE --id WHO --groups G1,G2`, `durable token revoke --file FILE --id WHO` or `durable token list --file FILE [--json]`"

// cmdToken is `durable token create|revoke|list`: the approver's token
// file, which a running approver re-reads when it changes.
func cmdToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return service.Usagef(tokenUsage)
	}
	switch args[0] {
	case "create":
		return tokenCreate(args[1:], stdout, stderr)
	case "revoke":
		return tokenRevoke(args[1:], stderr)
	case "list":
		return tokenList(args[1:], stdout, stderr)
	}
	return service.Usagef(tokenUsage)
}

// tokenCreate adds the hash of a new token to FILE and prints the token,
// once, on stdout (and nothing else there, so scripts can capture it).
func tokenCreate(args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable token create", stderr)
	file := fs.String("file", "", "token file the approver reads with --tokens (created 0600 when missing; required)")
	id := fs.String("id", "", "identity the token stands for, recorded with every decision (required)")
	groups := fs.String("groups", "", "comma-separated groups: whose approvals the token may decide; operators may read, cancel and redrive runs (required)")
	pos, err := service.ParseArgs(fs, args)
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

// tokenRevoke removes an identity's token from FILE.
func tokenRevoke(args []string, stderr io.Writer) error {
	fs := service.NewFlagSet("durable token revoke", stderr)
	file := fs.String("file", "", "token file the approver reads with --tokens (required)")
	id := fs.String("id", "", "identity whose token is revoked (required)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("token revoke: unexpected argument %q", pos[0])
	}
	if *file == "" || strings.TrimSpace(*id) == "" {
		return service.Usagef("token revoke: --file FILE and --id WHO are required")
	}
	if err := tokens.Revoke(*file, *id); err != nil {
		if errors.Is(err, tokens.ErrInvalid) || errors.Is(err, tokens.ErrUnknownID) || errors.Is(err, os.ErrNotExist) {
			return service.UsageError{Msg: "token revoke: " + err.Error()}
		}
		return fmt.Errorf("token revoke: %w", err)
	}
	fmt.Fprintf(stderr, "revoked the token of %s in %s; an approver reading the file refuses it within %s\n", strings.TrimSpace(*id), *file, tokens.WatchInterval)
	return nil
}

// tokenView is a token file entry as `token list --json` prints it.
type tokenView struct {
	ID        string    `json:"id"`
	Groups    []string  `json:"groups"`
	CreatedAt time.Time `json:"created_at"`
}

// tokenList prints FILE's identities and groups (never a digest).
func tokenList(args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable token list", stderr)
	file := fs.String("file", "", "token file the approver reads with --tokens (required)")
	asJSON := fs.Bool("json", false, `print {"tokens": [{"id", "groups", "created_at"}]}`)
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("token list: unexpected argument %q", pos[0])
	}
	if *file == "" {
		return service.Usagef("token list: --file FILE is required")
	}
	entries, err := tokens.Entries(*file)
	if errors.Is(err, os.ErrNotExist) {
		return service.UsageError{Msg: "token list: " + err.Error()}
	}
	if err != nil {
		return fmt.Errorf("token list: %w", err)
	}
	views := make([]tokenView, 0, len(entries))
	for _, e := range entries {
		views = append(views, tokenView{ID: e.ID, Groups: e.Groups, CreatedAt: e.CreatedAt})
	}
	if *asJSON {
		return writeJSON(stdout, map[string][]tokenView{"tokens": views})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tGROUPS\tCREATED")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.ID, strings.Join(v.Groups, ","), v.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
