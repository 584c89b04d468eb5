package workercmd_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/workercmd"
)

func registry() *steps.Registry {
	wf := steps.New[struct{}]("noop", 1).Step("only", func(_ context.Context, _ *steps.Context, s struct{}) (steps.Outcome[struct{}], error) {
		return steps.Complete(s), nil
	})
	return steps.NewRegistry().MustRegister(wf)
}

// Refusals happen before anything connects: each is a usage error (exit 2)
// that names what was wrong.
func TestRunRefusesBadConfigBeforeConnecting(t *testing.T) {
	var region string
	withRegion := workercmd.Config{Registry: registry(), Flags: func(fs *flag.FlagSet) { fs.StringVar(&region, "region", "", "where") }}
	for _, tc := range []struct {
		name string
		cfg  workercmd.Config
		args []string
		want string
	}{
		{"no registry", workercmd.Config{}, nil, "no workflows registered"},
		{"unknown flag", workercmd.Config{Registry: registry()}, []string{"--region", "eu"}, "flag provided but not defined: -region"},
		{"own flag, then a bad one", withRegion, []string{"--region", "eu", "--concurrency", "-1"}, "--concurrency and --max-ack-pending must not be negative"},
		{"positional", workercmd.Config{Registry: registry(), Name: "expense"}, []string{"now"}, `expense: unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := workercmd.Run(context.Background(), tc.args, io.Discard, tc.cfg)
			var u service.UsageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) || service.ExitCode(err) != service.ExitUsage {
				t.Fatalf("Run = %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
	if region != "eu" {
		t.Fatalf("the binary's own flag --region = %q, want eu", region)
	}
}

// -h lists the flags of `durable worker` and the binary's own.
func TestHelpListsEveryFlag(t *testing.T) {
	var out strings.Builder
	cfg := workercmd.Config{Registry: registry(), Name: "expense", Flags: func(fs *flag.FlagSet) { fs.String("region", "", "where the expenses are paid") }}
	err := workercmd.Run(context.Background(), []string{"-h"}, &out, cfg)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Run -h = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"Usage of expense", "-nats", "-redis", "-replicas", "-concurrency", "-ack-wait", "-max-ack-pending", "-drain-timeout", "-metrics", "-nats-creds", "-redis-tls-ca", "-region"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("-h does not list %s:\n%s", f, out.String())
		}
	}
}
