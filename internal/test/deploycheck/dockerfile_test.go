package deploycheck

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// dockerInstruction is one instruction of a Dockerfile, continuation
// lines joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t testing.TB, path string) []dockerInstruction {
	t.Helper()
	var out []dockerInstruction
	var cur strings.Builder
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("%s ends inside a continued instruction", path)
	}
	return out
}

var fromRE = regexp.MustCompile(`^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$`)

// A light check of deploy/Dockerfile, without a Docker daemon: a Go build
// stage making a static binary, a distroless final stage that runs it as
// a non-root user.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, deployPath(t, "Dockerfile"))
	type stage struct{ image, name string }
	var stages []stage
	var build, last []dockerInstruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			m := fromRE.FindStringSubmatch(in.args)
			if m == nil {
				t.Fatalf("FROM %s: unexpected form", in.args)
			}
			stages = append(stages, stage{m[1], m[2]})
			if len(stages) == 2 {
				build = last
			}
			last = nil
			continue
		}
		last = append(last, in)
	}
	if len(stages) != 2 {
		t.Fatalf("stages %v: want a build stage and a runtime stage", stages)
	}
	if !strings.HasPrefix(stages[0].image, "golang:1.") || stages[0].name == "" {
		t.Errorf("build stage FROM %s AS %q: want golang:1.x, named", stages[0].image, stages[0].name)
	}
	if !strings.HasPrefix(stages[1].image, "gcr.io/distroless/static") || !strings.HasSuffix(stages[1].image, ":nonroot") {
		t.Errorf("runtime stage FROM %s: want gcr.io/distroless/static...:nonroot", stages[1].image)
	}

	var goBuild string
	cacheMounts := 0
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
		if in.cmd == "RUN" {
			cacheMounts += strings.Count(in.args, "--mount=type=cache")
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w"`, "./cmd/durable", "-o /out/durable"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("build stage: the go build line lacks %s: %q", want, goBuild)
		}
	}
	if cacheMounts < 2 {
		t.Errorf("build stage: want cache mounts for the module and build caches, found %d", cacheMounts)
	}

	var user, entrypoint string
	copied := false
	for _, in := range last {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			copied = copied || strings.Contains(in.args, "--from="+stages[0].name+" /out/durable /durable")
		case "RUN":
			t.Errorf("runtime stage: RUN %s: distroless has no shell", in.args)
		}
	}
	if !copied {
		t.Errorf("runtime stage: want COPY --from=%s /out/durable /durable", stages[0].name)
	}
	// Numeric, so that Kubernetes can check runAsNonRoot; 65532 is
	// distroless's nonroot.
	if uid(user) != "65532" {
		t.Errorf("runtime stage: USER %q, want 65532:65532 (nonroot)", user)
	}
	if entrypoint != `["/durable"]` {
		t.Errorf("runtime stage: ENTRYPOINT %s, want [\"/durable\"]", entrypoint)
	}

	// The Kubernetes pods run as that user too.
	_, ms := k8sBase(t)
	for _, m := range ms {
		d, ok := m.obj.(*appsv1.Deployment)
		if !ok {
			continue
		}
		sc := d.Spec.Template.Spec.SecurityContext
		if sc == nil || sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != uid(user) {
			t.Errorf("deploy/k8s %s: runAsUser is not the image's user %s", d.Name, user)
		}
	}
}

func uid(user string) string {
	u, _, _ := strings.Cut(user, ":")
	return u
}
