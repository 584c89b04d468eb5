package deploycheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// k8sScheme holds the kinds deploy/k8s may use: the Kubernetes API groups
// of its manifests and kustomize's Kustomization. A document of any other
// kind fails to decode: register its group here.
var k8sScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	s.AddKnownTypeWithName(kustomizationGVK, &kustomization{})
	return s
}()

// k8sDecoder decodes YAML (or JSON) as the API server does in strict field
// validation: case-sensitive field names, and unknown or duplicate fields
// are errors (encoding/json alone would take readOnlyRootFileSystem for
// readOnlyRootFilesystem).
var k8sDecoder = serializer.NewCodecFactory(k8sScheme, serializer.EnableStrict).UniversalDeserializer()

// manifest is one decoded document of a file under deploy/k8s.
type manifest struct {
	file string
	obj  runtime.Object
}

// decodeManifests decodes every YAML document of the file at path strictly
// into the registered type of its apiVersion and kind.
func decodeManifests(path string) ([]manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []manifest
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if isEmptyYAML(doc) {
			continue
		}
		obj, gvk, err := k8sDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", path, i, err)
		}
		if gvk.Kind == kustomizationGVK.Kind {
			return nil, fmt.Errorf("%s, document %d: a Kustomization is not a resource", path, i)
		}
		out = append(out, manifest{file: filepath.Base(path), obj: obj})
	}
}

// isEmptyYAML reports whether a document holds only comments and blanks.
func isEmptyYAML(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.config.k8s.io", Version: "v1beta1", Kind: "Kustomization"}

// kustomization is the part of kustomize's Kustomization this base uses,
// decoded strictly: a field kustomize knows but this struct does not fails
// too, which is the point (add it here once the test checks it).
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string   `json:"namespace"`
	Resources       []string `json:"resources"`
	Labels          []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
		IncludeTemplates bool              `json:"includeTemplates"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
}

// DeepCopyObject makes kustomization a runtime.Object for the decoder.
func (k *kustomization) DeepCopyObject() runtime.Object {
	c := *k
	c.Resources = slices.Clone(k.Resources)
	c.Labels = slices.Clone(k.Labels)
	c.Images = slices.Clone(k.Images)
	return &c
}

func decodeKustomization(b []byte) (*kustomization, error) {
	obj, _, err := k8sDecoder.Decode(b, nil, nil)
	if err != nil {
		return nil, err
	}
	k, ok := obj.(*kustomization)
	if !ok {
		return nil, fmt.Errorf("a %T, not a Kustomization", obj)
	}
	return k, nil
}

// k8sBase loads deploy/k8s: the kustomization and every resource it lists.
func k8sBase(t testing.TB) (*kustomization, []manifest) {
	t.Helper()
	dir := deployPath(t, "k8s")
	k, err := decodeKustomization(readFile(t, filepath.Join(dir, "kustomization.yaml")))
	if err != nil {
		t.Fatalf("deploy/k8s/kustomization.yaml: %v", err)
	}
	var all []manifest
	for _, r := range k.Resources {
		ms, err := decodeManifests(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ms...)
	}
	return k, all
}

// Every YAML file in deploy/k8s is the kustomization or one of its
// resources, and decodes strictly.
func TestK8sFilesDecodeStrictly(t *testing.T) {
	k, _ := k8sBase(t)
	files, err := filepath.Glob(deployPath(t, "k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		if base != "kustomization.yaml" && !slices.Contains(k.Resources, base) {
			t.Errorf("deploy/k8s/%s is not listed in kustomization.yaml's resources", base)
		}
	}
	if dirs, _ := filepath.Glob(deployPath(t, "k8s", "*", "*.yaml")); len(dirs) > 0 {
		t.Errorf("YAML below deploy/k8s/ that deploycheck does not read: %v", dirs)
	}
}

func TestK8sFleet(t *testing.T) {
	k, ms := k8sBase(t)

	var (
		deployments = map[string]*appsv1.Deployment{}
		pdbs        []*policyv1.PodDisruptionBudget
		services    = map[string]*corev1.Service{}
		configMaps  = map[string]*corev1.ConfigMap{}
		secrets     = map[string]*corev1.Secret{}
	)
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			deployments[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, o)
		case *corev1.Service:
			services[o.Name] = o
		case *corev1.ConfigMap:
			configMaps[o.Name] = o
		case *corev1.Secret:
			secrets[o.Name] = o
		}
	}

	for _, cm := range configMaps {
		for k := range cm.Data {
			checkEnv(t, "deploy/k8s ConfigMap "+cm.Name, k)
		}
	}

	want := map[string]int32{"durable-worker": 3, "durable-scheduler": 2, "durable-approver": 2}
	if got := slices.Sorted(mapKeys(deployments)); !slices.Equal(got, slices.Sorted(mapKeys(want))) {
		t.Fatalf("Deployments %v, want %v", got, slices.Sorted(mapKeys(want)))
	}

	// The image the kustomization rewrites is the one every container names.
	if len(k.Images) != 1 || k.Images[0].NewName == "" {
		t.Errorf("kustomization.yaml: want one images entry with newName, got %+v", k.Images)
	}

	for name, d := range deployments {
		where := "deploy/k8s " + name
		if d.Spec.Replicas == nil || *d.Spec.Replicas != want[name] {
			t.Errorf("%s: replicas %v, want %d", where, d.Spec.Replicas, want[name])
		}
		sel, err := metaSelector(d.Spec.Selector.MatchLabels)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match the pod template's labels %v", where, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
		pod := d.Spec.Template.Spec
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod securityContext.runAsNonRoot must be true", where)
		}
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", where, len(pod.Containers))
		}
		c := pod.Containers[0]
		if len(k.Images) == 1 && c.Image != k.Images[0].Name {
			t.Errorf("%s: image %q, want %q (rewritten by kustomization.yaml)", where, c.Image, k.Images[0].Name)
		}
		component := strings.TrimPrefix(name, "durable-")
		if len(c.Args) == 0 || c.Args[0] != component {
			t.Errorf("%s: args %v, want the %s subcommand first", where, c.Args, component)
		}
		checkArgs(t, where, c.Args)

		// Probes: liveness on /healthz and readiness on /readyz, on the
		// port --metrics listens on.
		metricsAddr, ok := flagValue(c.Args, "metrics")
		if !ok {
			t.Errorf("%s: no --metrics in args: /healthz and /readyz are served there", where)
		}
		_, metricsPort, _ := strings.Cut(metricsAddr, ":")
		for _, p := range []struct {
			kind  string
			probe *corev1.Probe
			path  string
		}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: no %s probe (httpGet %s)", where, p.kind, p.path)
				continue
			}
			if p.probe.HTTPGet.Path != p.path {
				t.Errorf("%s: %s probe on %s, want %s", where, p.kind, p.probe.HTTPGet.Path, p.path)
			}
			if port := containerPort(c, p.probe.HTTPGet.Port.String()); strconv.Itoa(int(port)) != metricsPort {
				t.Errorf("%s: %s probe on port %s (%d), --metrics listens on %q", where, p.kind, p.probe.HTTPGet.Port.String(), port, metricsAddr)
			}
		}
		if ann := d.Spec.Template.Annotations; ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != metricsPort {
			t.Errorf("%s: prometheus.io annotations %v, want scrape \"true\" on port %s", where, ann, metricsPort)
		}

		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			lim, req := c.Resources.Limits[r], c.Resources.Requests[r]
			if lim.IsZero() || req.IsZero() {
				t.Errorf("%s: want %s request and limit", where, r)
			} else if req.Cmp(lim) > 0 {
				t.Errorf("%s: %s request %s above its limit %s", where, r, req.String(), lim.String())
			}
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: container securityContext wants readOnlyRootFilesystem, allowPrivilegeEscalation false, capabilities.drop [ALL]", where)
		}

		// Environment: the shared ConfigMap (streams at R3), its own NATS
		// user, and secrets that exist, with keys that exist.
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
			checkEnv(t, where, e.Name)
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
				s, ok := secrets[r.SecretKeyRef.Name]
				if _, has := s.StringData[r.SecretKeyRef.Key]; !ok || !has {
					t.Errorf("%s: %s from secret %s key %s, which secrets.yaml does not define", where, e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Key)
				}
			}
		}
		for _, from := range c.EnvFrom {
			if from.ConfigMapRef == nil || configMaps[from.ConfigMapRef.Name] == nil {
				t.Errorf("%s: envFrom %+v names no ConfigMap of deploy/k8s", where, from)
				continue
			}
			cm := configMaps[from.ConfigMapRef.Name]
			if cm.Data["DURABLE_REPLICAS"] != "3" {
				t.Errorf("%s: ConfigMap %s sets DURABLE_REPLICAS=%q, want 3", where, cm.Name, cm.Data["DURABLE_REPLICAS"])
			}
		}
		if len(c.EnvFrom) == 0 {
			t.Errorf("%s: no envFrom the shared ConfigMap", where)
		}
		if env["DURABLE_NATS_USER"].Value != component || env["DURABLE_NATS_INBOX_PREFIX"].Value != "_INBOX_"+component {
			t.Errorf("%s: NATS user %q, inbox prefix %q: want %s and _INBOX_%s (deploy/nats/README.md)",
				where, env["DURABLE_NATS_USER"].Value, env["DURABLE_NATS_INBOX_PREFIX"].Value, component, component)
		}
		for _, k := range []string{"DURABLE_NATS_PASSWORD", "DURABLE_REDIS_URL"} {
			if e := env[k]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: %s must come from a Secret", where, k)
			}
		}

		// Volumes: every mount has its volume, every secret volume its Secret.
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Volumes {
			vols[v.Name] = v
			if v.Secret != nil && secrets[v.Secret.SecretName] == nil {
				t.Errorf("%s: volume %s mounts secret %s, which secrets.yaml does not define", where, v.Name, v.Secret.SecretName)
			}
		}
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("%s: mounts volume %s, which the pod does not define", where, m.Name)
			}
		}

		// A PodDisruptionBudget selects these pods and lets at most one go.
		covered := false
		for _, p := range pdbs {
			s, err := metaSelector(p.Spec.Selector.MatchLabels)
			if err == nil && s.Matches(labels.Set(d.Spec.Template.Labels)) {
				covered = true
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("%s: PodDisruptionBudget %s: maxUnavailable %v, want 1", where, p.Name, p.Spec.MaxUnavailable)
				}
			}
		}
		if !covered {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", where)
		}
	}

	// The approver: --tokens is the mounted Secret's file, and its Service
	// reaches the --http port.
	ap := deployments["durable-approver"]
	c := ap.Spec.Template.Spec.Containers[0]
	tokens, _ := flagValue(c.Args, "tokens")
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range ap.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && filepath.Dir(tokens) == m.MountPath {
				s := secrets[v.Secret.SecretName]
				_, mounted = s.StringData[filepath.Base(tokens)]
			}
		}
	}
	if !mounted {
		t.Errorf("durable-approver: --tokens %s is not a key of a mounted Secret", tokens)
	}
	httpAddr, _ := flagValue(c.Args, "http")
	_, httpPort, _ := strings.Cut(httpAddr, ":")
	svc := services["durable-approver"]
	if svc == nil {
		t.Fatal("no Service durable-approver")
	}
	sel, _ := metaSelector(svc.Spec.Selector)
	if !sel.Matches(labels.Set(ap.Spec.Template.Labels)) {
		t.Errorf("Service durable-approver: selector %v does not select the approver's pods", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 1 || strconv.Itoa(int(containerPort(c, svc.Spec.Ports[0].TargetPort.String()))) != httpPort {
		t.Errorf("Service durable-approver: ports %+v do not reach --http %s", svc.Spec.Ports, httpAddr)
	}

	// NATS and Redis are external: ExternalName Services the ConfigMap and
	// Secrets name.
	for _, name := range []string{"nats", "redis"} {
		s := services[name]
		if s == nil || s.Spec.Type != corev1.ServiceTypeExternalName || s.Spec.ExternalName == "" {
			t.Errorf("want an ExternalName Service %q for the external %s", name, name)
		}
	}
	if u := configMaps["durable-config"].Data["DURABLE_NATS_URL"]; !strings.Contains(u, "//nats:") {
		t.Errorf("DURABLE_NATS_URL %q does not name the nats Service", u)
	}

	// Secrets in git are placeholders only.
	for _, s := range secrets {
		if len(s.Data) > 0 {
			t.Errorf("Secret %s: use stringData placeholders, not data", s.Name)
		}
		for key, v := range s.StringData {
			if !strings.Contains(v, "CHANGE_ME") && strings.TrimSpace(v) != `{"tokens": []}` {
				t.Errorf("Secret %s key %s: %q is not a placeholder (CHANGE_ME)", s.Name, key, v)
			}
		}
	}
}

func metaSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromValidatedSet(labels.Set(m)), nil
}

// containerPort resolves a probe's or Service's port (a number or the name
// of one of c's ports).
func containerPort(c corev1.Container, port string) int32 {
	if n, err := strconv.Atoi(port); err == nil {
		return int32(n)
	}
	for _, p := range c.Ports {
		if p.Name == port {
			return p.ContainerPort
		}
	}
	return -1
}

// The decode is strict: a misspelt field, an unknown kind and a malformed
// value each fail, so TestK8sFleet can't pass on a manifest the API server
// would refuse or silently cut short.
func TestK8sRejectsMistakes(t *testing.T) {
	for _, m := range []struct{ file, old, new, want string }{
		{"worker.yaml", "livenessProbe:", "livenesProbe:", "livenesProbe"},
		{"approver.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "readOnlyRootFileSystem"},
		{"scheduler.yaml", "kind: PodDisruptionBudget", "kind: PodDisruptionBudgett", "PodDisruptionBudgett"},
		{"worker.yaml", "apiVersion: apps/v1", "apiVersion: apps/v1beta1", "apps/v1beta1"},
		{"worker.yaml", "memory: 1Gi", "memory: 1 GB", "quantities must match"},
		{"configmap.yaml", "  DURABLE_LOG_LEVEL: info", "  DURABLE_LOG_LEVEL: info\n  DURABLE_LOG_LEVEL: debug", "DURABLE_LOG_LEVEL"},
	} {
		path := writeMutated(t, deployPath(t, "k8s", m.file), m.old, m.new)
		_, err := decodeManifests(path)
		t.Logf("%s, %q → %q: %v", m.file, m.old, m.new, err)
		if err == nil || !strings.Contains(err.Error(), m.want) {
			t.Errorf("%s with %q → %q: error %v, want one mentioning %q", m.file, m.old, m.new, err, m.want)
		}
	}

	for _, m := range []struct{ old, new string }{
		{"resources:", "resource:"},
		{"newName:", "newname:"},
	} {
		bad := bytes.Replace(readFile(t, deployPath(t, "k8s", "kustomization.yaml")), []byte(m.old), []byte(m.new), 1)
		if _, err := decodeKustomization(bad); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(m.new, ":")) {
			t.Errorf("kustomization.yaml with %q misspelt %q: error %v", m.old, m.new, err)
		}
	}
}
