package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The manifests live next to this test; the Kubernetes ones must all be in
// kubernetesDir, one kind of object per known apiVersion/kind.
const (
	kubernetesDir  = "kubernetes"
	rulesFile      = "prometheus/rules.yaml"
	scrapeJobFile  = "prometheus/scrape-server.yaml"
	dockerfile     = "Dockerfile"
	namespace      = "gpuwarden"
	imageRepo      = "ghcr.io/gpuwarden/gpuwarden"
	agentName      = "gpuwarden-agent"
	serverName     = "gpuwarden-server"
	kustomizeFile  = "kustomization.yaml"
	exampleSuffix  = ".example.yaml"
	gpuTaint       = "nvidia.com/gpu"
	gpuNodeLabel   = "nvidia.com/gpu.present"
	agentPort      = 7070
	agentProbePath = "/api/v1/status"
	serverProbe    = "/readyz"
)

// kustomization is the part of kustomize's Kustomization that these
// manifests use; decoding is strict, so a new field must be added here first.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// manifest is one decoded YAML document and where it came from.
type manifest struct {
	file  string // base name in kubernetesDir
	index int    // 1-based document number in the file
	kind  string
	name  string
	obj   any // *appsv1.DaemonSet, *corev1.Service, *kustomization, …
}

func (m manifest) String() string {
	return fmt.Sprintf("%s#%d %s/%s", m.file, m.index, m.kind, m.name)
}

// newObject returns the typed object an apiVersion/kind decodes into; a
// kind without one here is an error, so that nothing goes unchecked.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		return &kustomization{}, nil
	}
	return nil, fmt.Errorf("unknown apiVersion %q kind %q", apiVersion, kind)
}

// docSeparator splits a YAML stream into its documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// splitDocuments returns the documents of a YAML stream that hold more
// than comments and blank lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		for line := range strings.Lines(d) {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, []byte(d))
				break
			}
		}
	}
	return docs
}

// decodeFile decodes every document of a manifest file strictly into its
// typed object: an unknown or duplicated field is an error naming the file.
func decodeFile(path string) ([]manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs := splitDocuments(data)
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no YAML document", path)
	}
	var out []manifest
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		obj, err := newObject(tm.APIVersion, tm.Kind)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", path, i+1, tm.Kind, err)
		}
		name := ""
		if o, ok := obj.(metav1.Object); ok {
			name = o.GetName()
		}
		out = append(out, manifest{file: filepath.Base(path), index: i + 1, kind: tm.Kind, name: name, obj: obj})
	}
	return out, nil
}

// manifestFiles lists the YAML files of kubernetesDir.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", kubernetesDir)
	}
	return files
}

// loadAll decodes every manifest file, failing the test on the first error.
func loadAll(t *testing.T) []manifest {
	t.Helper()
	var all []manifest
	for _, f := range manifestFiles(t) {
		ms, err := decodeFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ms...)
	}
	return all
}

// find returns the one object of type T named name.
func find[T any](t *testing.T, all []manifest, name string) T {
	t.Helper()
	var found []T
	for _, m := range all {
		if o, ok := m.obj.(T); ok && m.name == name {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T named %q, found %d", zero, name, len(found))
	}
	return found[0]
}

// workload is a pod template with its owner, for checks over every pod.
type workload struct {
	m        manifest
	selector *metav1.LabelSelector
	pod      *corev1.PodTemplateSpec
}

func workloads(all []manifest) []workload {
	var ws []workload
	for _, m := range all {
		switch o := m.obj.(type) {
		case *appsv1.DaemonSet:
			ws = append(ws, workload{m, o.Spec.Selector, &o.Spec.Template})
		case *appsv1.Deployment:
			ws = append(ws, workload{m, o.Spec.Selector, &o.Spec.Template})
		case *appsv1.StatefulSet:
			ws = append(ws, workload{m, o.Spec.Selector, &o.Spec.Template})
		}
	}
	return ws
}

// allContainers returns init and regular containers alike.
func allContainers(p *corev1.PodSpec) []corev1.Container {
	return slices.Concat(p.InitContainers, p.Containers)
}

// check is one got/want comparison of a table.
type check struct {
	name      string
	got, want any
}

func runChecks(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
}

func container(t *testing.T, p *corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range p.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// flagValue returns the value of --name=VALUE or --name VALUE in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			return args[i+1], true
		}
	}
	return "", false
}

// flagOf is the value of --name in args, "<unset>" when there is none.
func flagOf(args []string, name string) string {
	if v, ok := flagValue(args, name); ok {
		return v
	}
	return "<unset>"
}

func hasFlag(args []string, name string) bool {
	_, ok := flagValue(args, name)
	return ok || slices.Contains(args, "--"+name)
}

// mountFor returns the volume mount under which path lies.
func mountFor(c corev1.Container, path string) *corev1.VolumeMount {
	for i, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volume(p *corev1.PodSpec, name string) *corev1.Volume {
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}

// resolvePort returns the number of a container port given by number or
// name, and whether a container of the pod exposes it.
func resolvePort(p *corev1.PodSpec, port intstr.IntOrString) (int32, bool) {
	for _, c := range allContainers(p) {
		for _, cp := range c.Ports {
			if (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) ||
				(port.Type == intstr.String && port.StrVal != "" && cp.Name == port.StrVal) {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func TestManifestsDecodeStrictly(t *testing.T) {
	for _, f := range manifestFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			ms, err := decodeFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				o, ok := m.obj.(metav1.Object)
				if !ok {
					continue // the kustomization
				}
				if o.GetName() == "" {
					t.Errorf("%s: no metadata.name", m)
				}
				if _, ns := m.obj.(*corev1.Namespace); !ns && o.GetNamespace() != namespace {
					t.Errorf("%s: namespace %q, want %q", m, o.GetNamespace(), namespace)
				}
			}
		})
	}
}

func TestMalformedManifestNamesFile(t *testing.T) {
	tests := []struct {
		file string
		want []string // substrings of the error
	}{
		{"testdata/unknown-field.yaml", []string{"testdata/unknown-field.yaml", "document 2", "nodeSelectr"}},
		{"testdata/unknown-kind.yaml", []string{"testdata/unknown-kind.yaml", "document 1", `"CronJob"`}},
		{"testdata/duplicate-field.yaml", []string{"testdata/duplicate-field.yaml", "document 1", "replicas"}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			_, err := decodeFile(tt.file)
			if err == nil {
				t.Fatal("decoded without error, want one")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"one", "a: 1\n", 1},
		{"two", "a: 1\n---\nb: 2\n", 2},
		{"leading separator and comment-only document", "# head\n---\na: 1\n--- # next\nb: 2\n---\n# tail only\n", 2},
		{"dashes inside a value are not a separator", "a: |\n  ---x\nb: 2\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := len(splitDocuments([]byte(tt.in))); got != tt.want {
				t.Errorf("got %d documents, want %d", got, tt.want)
			}
		})
	}
}

func TestAgentDaemonSet(t *testing.T) {
	all := loadAll(t)
	ds := find[*appsv1.DaemonSet](t, all, agentName)
	pod := &ds.Spec.Template.Spec
	c := container(t, pod, "agent")

	tolerates := false
	for _, tol := range pod.Tolerations {
		if tol.Key == gpuTaint && tol.Effect == corev1.TaintEffectNoSchedule &&
			(tol.Operator == corev1.TolerationOpExists || tol.Operator == "" && tol.Value != "") {
			tolerates = true
		}
	}
	env := func(name string) string {
		if e := envVar(c, name); e != nil {
			return e.Value
		}
		return "<unset>"
	}
	nodeNameFromDownwardAPI := false
	if e := envVar(c, "NODE_NAME"); e != nil && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
		nodeNameFromDownwardAPI = e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}
	label, _ := flagValue(c.Args, "label")

	// The token is a file from a Secret, named by --token-file.
	tokenFile, _ := flagValue(c.Args, "token-file")
	tokenFromSecret := false
	if m := mountFor(c, tokenFile); m != nil {
		if v := volume(pod, m.Name); v != nil && v.Secret != nil && m.ReadOnly {
			tokenFromSecret = true
		}
	}
	// The ledger lives on the node, where --data-dir points.
	dataDir, _ := flagValue(c.Args, "data-dir")
	stateHostPath := ""
	if m := mountFor(c, dataDir); m != nil {
		if v := volume(pod, m.Name); v != nil && v.HostPath != nil {
			stateHostPath = v.HostPath.Path
		}
	}
	probe := func(p *corev1.Probe) string {
		if p == nil || p.HTTPGet == nil {
			return "<no http probe>"
		}
		port, _ := resolvePort(pod, p.HTTPGet.Port)
		return fmt.Sprintf("%s:%d", p.HTTPGet.Path, port)
	}
	var added []corev1.Capability
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		added = sc.Capabilities.Add
	}
	listen, _ := flagValue(c.Args, "listen")

	runChecks(t, []check{
		{"first arg is the up command", c.Args[0], "up"},
		{"nodeSelector selects GPU nodes", pod.NodeSelector[gpuNodeLabel], "true"},
		{"tolerates the nvidia.com/gpu NoSchedule taint", tolerates, true},
		{"runtimeClassName", ptrString(pod.RuntimeClassName), "nvidia"},
		{"hostPID", pod.HostPID, true},
		{"hostNetwork", pod.HostNetwork, false},
		{"NVIDIA_VISIBLE_DEVICES", env("NVIDIA_VISIBLE_DEVICES"), "all"},
		{"NVIDIA_DRIVER_CAPABILITIES", env("NVIDIA_DRIVER_CAPABILITIES"), "utility"},
		{"NODE_NAME from the downward API", nodeNameFromDownwardAPI, true},
		{"node name passed as a label", strings.Contains(label, "=$(NODE_NAME)"), true},
		// From the pod's host name the node ID would change on every
		// rollout, and the server would refuse a restarted pod as a second
		// machine until the first is lost.
		{"node ID is the Kubernetes node", flagOf(c.Args, "node-id"), "$(NODE_NAME)"},
		{"instance ID is the Kubernetes node", flagOf(c.Args, "instance-id"), "$(NODE_NAME)"},
		{"label has owner and project", strings.Contains(label, "owner=") && strings.Contains(label, "project="), true},
		{"token file from a read-only Secret mount", tokenFromSecret, true},
		{"state on the node's /var/lib/gpuwarden", stateHostPath, "/var/lib/gpuwarden"},
		{"idle stop is dry run only", hasFlag(c.Args, "dry-run"), true},
		{"fleet server named", hasFlag(c.Args, "server"), true},
		{"listens on every address", listen, fmt.Sprintf("0.0.0.0:%d", agentPort)},
		{"liveness probe", probe(c.LivenessProbe), fmt.Sprintf("%s:%d", agentProbePath, agentPort)},
		{"readiness probe", probe(c.ReadinessProbe), fmt.Sprintf("%s:%d", agentProbePath, agentPort)},
		{"capabilities added", added, []corev1.Capability{"SYSLOG"}},
		{"no service account token", ptrBool(pod.AutomountServiceAccountToken), false},
	})
}

func TestServerDeployment(t *testing.T) {
	all := loadAll(t)
	d := find[*appsv1.Deployment](t, all, serverName)
	pod := &d.Spec.Template.Spec
	c := container(t, pod, "server")

	dsn := envVar(c, "GPUWARDEN_DB")
	dsnSecret := ""
	if dsn != nil && dsn.Value == "" && dsn.ValueFrom != nil && dsn.ValueFrom.SecretKeyRef != nil {
		dsnSecret = dsn.ValueFrom.SecretKeyRef.Name + "/" + dsn.ValueFrom.SecretKeyRef.Key
	}
	// No DSN, with its password, may sit in the manifest or on the command line.
	literalDSN := false
	for _, s := range slices.Concat(c.Command, c.Args) {
		literalDSN = literalDSN || strings.Contains(s, "postgres://") || strings.Contains(s, "postgresql://")
	}
	for _, e := range c.Env {
		literalDSN = literalDSN || strings.Contains(e.Value, "postgres://") || strings.Contains(e.Value, "postgresql://")
	}
	readiness := "<no http probe>"
	if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil {
		readiness = p.HTTPGet.Path
	}
	svc := find[*corev1.Service](t, all, serverName)
	svcPort := int32(0)
	if len(svc.Spec.Ports) > 0 {
		svcPort = svc.Spec.Ports[0].Port
	}
	strategy := d.Spec.Strategy.Type
	if d.Spec.Replicas != nil && *d.Spec.Replicas == 1 {
		strategy += " with one replica" // RollingUpdate of a single replica still overlaps
	}
	runAsNonRoot := false
	if sc := pod.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
		runAsNonRoot = *sc.RunAsNonRoot
	}

	runChecks(t, []check{
		{"first arg is the server command", c.Args[0], "server"},
		{"DSN from a Secret", dsnSecret, "gpuwarden-db/dsn"},
		{"no DSN literal in args or env", literalDSN, false},
		{"no --db flag (ps would show the password)", hasFlag(c.Args, "db"), false},
		// The first admin token is made with token create --bootstrap
		// (README.md), never by a replica, whose only outlet is its log.
		{"replicas do not bootstrap", hasFlag(c.Args, "no-bootstrap"), true},
		{"readiness probe on /readyz", readiness, serverProbe},
		{"Service port", svcPort, int32(8080)},
		{"rolling update", strategy, appsv1.RollingUpdateDeploymentStrategyType},
		{"runs as non-root", runAsNonRoot, true},
		{"no service account token", ptrBool(pod.AutomountServiceAccountToken), false},
	})
}

func ptrString(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func ptrBool(p *bool) string {
	if p == nil {
		return "<nil>"
	}
	return strconv.FormatBool(*p)
}

// allowedCapabilities are the capabilities a container may add: the agent's
// SYSLOG for /dev/kmsg (see agent-daemonset.yaml), nothing else.
var allowedCapabilities = map[string][]corev1.Capability{
	agentName + "/agent": {"SYSLOG"},
}

func TestContainersHardened(t *testing.T) {
	all := loadAll(t)
	for _, w := range workloads(all) {
		for _, c := range allContainers(&w.pod.Spec) {
			id := w.m.name + "/" + c.Name
			t.Run(id, func(t *testing.T) {
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
						t.Errorf("no %s request", r)
					}
					if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
						t.Errorf("no %s limit", r)
					}
					if req, lim := c.Resources.Requests[r], c.Resources.Limits[r]; req.Cmp(lim) > 0 {
						t.Errorf("%s request %s is over its limit %s", r, req.String(), lim.String())
					}
				}
				if c.LivenessProbe == nil {
					t.Error("no liveness probe")
				}
				if c.ReadinessProbe == nil {
					t.Error("no readiness probe")
				}
				for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
					if p == nil {
						continue
					}
					var port *intstr.IntOrString
					switch {
					case p.HTTPGet != nil:
						port = &p.HTTPGet.Port
					case p.TCPSocket != nil:
						port = &p.TCPSocket.Port
					}
					if port != nil {
						if _, ok := resolvePort(&w.pod.Spec, *port); !ok {
							t.Errorf("%s probe port %s is no container port", name, port.String())
						}
					}
				}
				sc := c.SecurityContext
				if sc == nil {
					t.Fatal("no securityContext")
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Error("runs privileged")
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Error("allowPrivilegeEscalation is not false")
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Error("readOnlyRootFilesystem is not true")
				}
				if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Error("capabilities do not drop ALL")
				} else {
					for _, a := range sc.Capabilities.Add {
						if !slices.Contains(allowedCapabilities[id], a) {
							t.Errorf("adds capability %s", a)
						}
					}
				}
			})
		}
		t.Run(w.m.name+"/pod", func(t *testing.T) {
			sc := w.pod.Spec.SecurityContext
			if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("pod seccompProfile is not RuntimeDefault")
			}
			if w.pod.Spec.HostNetwork || w.pod.Spec.HostIPC {
				t.Error("pod shares the host's network or IPC namespace")
			}
			if w.pod.Spec.HostPID && w.m.name != agentName {
				t.Error("hostPID outside the agent")
			}
		})
	}
}

func TestSelectorsMatchTemplates(t *testing.T) {
	all := loadAll(t)
	for _, w := range workloads(all) {
		t.Run(w.m.String(), func(t *testing.T) {
			if w.selector == nil || len(w.selector.MatchLabels) == 0 {
				t.Fatal("no selector matchLabels")
			}
			for k, v := range w.selector.MatchLabels {
				if got := w.pod.Labels[k]; got != v {
					t.Errorf("template label %s = %q, selector wants %q", k, got, v)
				}
			}
		})
	}
	// Every Service selects the pods of a workload, on a port they expose.
	for _, m := range all {
		svc, ok := m.obj.(*corev1.Service)
		if !ok {
			continue
		}
		t.Run(m.String(), func(t *testing.T) {
			var target *workload
			for _, w := range workloads(all) {
				matches := len(svc.Spec.Selector) > 0
				for k, v := range svc.Spec.Selector {
					matches = matches && w.pod.Labels[k] == v
				}
				if matches {
					target = &w
				}
			}
			if target == nil {
				t.Fatalf("selector %v selects no workload", svc.Spec.Selector)
			}
			for _, p := range svc.Spec.Ports {
				tp := p.TargetPort
				if tp.Type == intstr.Int && tp.IntVal == 0 {
					tp = intstr.FromInt32(p.Port) // targetPort defaults to port
				}
				if _, ok := resolvePort(&target.pod.Spec, tp); !ok {
					t.Errorf("port %s: targetPort %s is no container port of %s", p.Name, tp.String(), target.m.name)
				}
			}
		})
	}
}

func workloadNamed(t *testing.T, all []manifest, name string) *workload {
	t.Helper()
	for _, w := range workloads(all) {
		if w.m.name == name {
			return &w
		}
	}
	t.Fatalf("no workload %s", name)
	return nil
}

// TestScrapeAnnotations: the agent is scraped through the prometheus.io
// annotations; the server, whose /metrics needs a token, must not be (the
// generic job would get 401s), and scrape-server.yaml scrapes it instead.
func TestScrapeAnnotations(t *testing.T) {
	all := loadAll(t)
	agent := workloadNamed(t, all, agentName)
	a := agent.pod.Annotations
	port, err := strconv.Atoi(a["prometheus.io/port"])
	if err != nil {
		t.Errorf("prometheus.io/port %q: %v", a["prometheus.io/port"], err)
	}
	number, exposed := resolvePort(&agent.pod.Spec, intstr.FromInt(port))
	server := workloadNamed(t, all, serverName)
	runChecks(t, []check{
		{"agent prometheus.io/scrape", a["prometheus.io/scrape"], "true"},
		{"agent prometheus.io/path", a["prometheus.io/path"], "/metrics"},
		{"agent prometheus.io/port is a container port", exposed, true},
		{"agent prometheus.io/port is the agent port", number, int32(agentPort)},
		{"server not scraped by annotation", server.pod.Annotations["prometheus.io/scrape"] == "true", false},
	})
}

// scrapeFile is the part of prometheus.yml that scrape-server.yaml uses;
// decoding is strict, so a misspelt key fails.
type scrapeFile struct {
	ScrapeConfigs []struct {
		JobName        string `json:"job_name"`
		Scheme         string `json:"scheme"`
		MetricsPath    string `json:"metrics_path"`
		ScrapeInterval string `json:"scrape_interval,omitempty"`
		Authorization  struct {
			Type            string `json:"type"`
			CredentialsFile string `json:"credentials_file"`
		} `json:"authorization"`
		TLSConfig struct {
			CAFile     string `json:"ca_file"`
			ServerName string `json:"server_name"`
		} `json:"tls_config"`
		KubernetesSDConfigs []struct {
			Role       string `json:"role"`
			Namespaces struct {
				Names []string `json:"names"`
			} `json:"namespaces"`
		} `json:"kubernetes_sd_configs"`
		RelabelConfigs []struct {
			SourceLabels []string `json:"source_labels,omitempty"`
			Regex        string   `json:"regex,omitempty"`
			Action       string   `json:"action,omitempty"`
			TargetLabel  string   `json:"target_label,omitempty"`
			Replacement  string   `json:"replacement,omitempty"`
		} `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

// TestServerScrapeJob checks scrape-server.yaml against the server's
// Deployment: the pods it keeps, the port, the scheme, the token, and the
// name the TLS certificate must hold.
func TestServerScrapeJob(t *testing.T) {
	data, err := os.ReadFile(scrapeJobFile)
	if err != nil {
		t.Fatal(err)
	}
	var sf scrapeFile
	if err := yaml.UnmarshalStrict(data, &sf); err != nil {
		t.Fatalf("%s: %v", scrapeJobFile, err)
	}
	if len(sf.ScrapeConfigs) != 1 {
		t.Fatalf("%s: %d scrape configs, want 1", scrapeJobFile, len(sf.ScrapeConfigs))
	}
	job := sf.ScrapeConfigs[0]
	all := loadAll(t)
	server := workloadNamed(t, all, serverName)
	c := container(t, &server.pod.Spec, "server")
	addr, _ := flagValue(c.Args, "addr")
	_, serverPort, _ := strings.Cut(addr, ":")
	_, tls := flagValue(c.Args, "tls-cert")
	scheme := "http"
	if tls {
		scheme = "https"
	}
	keep := map[string]string{} // source label → regex of a keep action
	targets := []string{}
	for _, r := range job.RelabelConfigs {
		if r.Action == "keep" && len(r.SourceLabels) == 1 {
			keep[r.SourceLabels[0]] = r.Regex
		}
		if r.TargetLabel != "" {
			targets = append(targets, r.TargetLabel)
		}
	}
	sd := ""
	if len(job.KubernetesSDConfigs) == 1 {
		sd = job.KubernetesSDConfigs[0].Role + " in " + strings.Join(job.KubernetesSDConfigs[0].Namespaces.Names, ",")
	}
	agentServer, _ := flagValue(container(t, &workloadNamed(t, all, agentName).pod.Spec, "agent").Args, "server")
	runChecks(t, []check{
		{"scheme follows --tls-cert", job.Scheme, scheme},
		{"metrics_path", job.MetricsPath, "/metrics"},
		{"bearer token from a file", job.Authorization.Type + " " + strconv.FormatBool(job.Authorization.CredentialsFile != ""), "Bearer true"},
		{"discovers pods of the namespace", sd, "pod in " + namespace},
		{"keeps the server's pods", keep["__meta_kubernetes_pod_label_app_kubernetes_io_name"], server.pod.Labels["app.kubernetes.io/name"]},
		{"keeps the --addr port", keep["__meta_kubernetes_pod_container_port_number"], serverPort},
		{"sets the labels the rules match", targets, []string{"namespace", "pod"}},
		{"verifies the name agents use", "https://" + job.TLSConfig.ServerName + ":" + serverPort, agentServer},
		{"trusts a CA file", job.TLSConfig.CAFile != "", true},
	})
}

// TestAgentReachesServer: the agents' --server names the server's Service
// and port, by a host name the server's --allowed-hosts accepts.
func TestAgentReachesServer(t *testing.T) {
	all := loadAll(t)
	agentArgs := container(t, &workloadNamed(t, all, agentName).pod.Spec, "agent").Args
	serverArgs := container(t, &workloadNamed(t, all, serverName).pod.Spec, "server").Args
	url, _ := flagValue(agentArgs, "server")
	hostport, ok := strings.CutPrefix(url, "https://")
	host, port, _ := strings.Cut(hostport, ":")
	allowed, _ := flagValue(serverArgs, "allowed-hosts")
	svc := find[*corev1.Service](t, all, serverName)
	svcPort := ""
	if len(svc.Spec.Ports) == 1 {
		svcPort = strconv.Itoa(int(svc.Spec.Ports[0].Port))
	}
	runChecks(t, []check{
		{"--server is https", ok, true},
		{"--server names the Service", host, svc.Name + "." + svc.Namespace + ".svc"},
		{"--server port is the Service port", port, svcPort},
		{"server --allowed-hosts accepts it", slices.Contains(strings.Split(allowed, ","), host), true},
	})
}

// TestSecretsReferencedAreExamples keeps secrets.example.yaml in step with
// what the workloads read: every Secret and key they name has an example.
func TestSecretsReferencedAreExamples(t *testing.T) {
	all := loadAll(t)
	examples := map[string]*corev1.Secret{}
	for _, m := range all {
		if s, ok := m.obj.(*corev1.Secret); ok {
			if !strings.HasSuffix(m.file, exampleSuffix) {
				t.Errorf("%s: a Secret outside a %s file", m, exampleSuffix)
			}
			examples[s.Name] = s
		}
	}
	hasKey := func(name, key string) bool {
		s := examples[name]
		if s == nil {
			return false
		}
		_, inData := s.Data[key]
		_, inString := s.StringData[key]
		return inData || inString
	}
	for _, w := range workloads(all) {
		for _, c := range allContainers(&w.pod.Spec) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref := e.ValueFrom.SecretKeyRef
					if !hasKey(ref.Name, ref.Key) {
						t.Errorf("%s/%s env %s reads Secret %s key %s, which no example has", w.m.name, c.Name, e.Name, ref.Name, ref.Key)
					}
				}
			}
		}
		for _, v := range w.pod.Spec.Volumes {
			if v.Secret == nil {
				continue
			}
			if examples[v.Secret.SecretName] == nil {
				t.Errorf("%s volume %s mounts Secret %s, which has no example", w.m.name, v.Name, v.Secret.SecretName)
			}
			for _, item := range v.Secret.Items {
				if !hasKey(v.Secret.SecretName, item.Key) {
					t.Errorf("%s volume %s mounts key %s of Secret %s, which no example has", w.m.name, v.Name, item.Key, v.Secret.SecretName)
				}
			}
		}
	}
	// Placeholders only: a PEM body or password that looks real fails.
	placeholder := regexp.MustCompile(`REPLACE`)
	for name, s := range examples {
		for k, v := range s.StringData {
			if !placeholder.MatchString(v) {
				t.Errorf("Secret %s key %s is not a REPLACE… placeholder", name, k)
			}
		}
		if len(s.Data) > 0 {
			t.Errorf("Secret %s has base64 data; examples use stringData placeholders", name)
		}
	}
}

func TestKustomizationListsEveryFile(t *testing.T) {
	ms, err := decodeFile(filepath.Join(kubernetesDir, kustomizeFile))
	if err != nil {
		t.Fatal(err)
	}
	k, ok := ms[0].obj.(*kustomization)
	if !ok || len(ms) != 1 {
		t.Fatalf("%s holds %d documents, the first a %s; want one Kustomization", kustomizeFile, len(ms), ms[0].kind)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		if listed[r] {
			t.Errorf("%s lists %s twice", kustomizeFile, r)
		}
		listed[r] = true
		if _, err := os.Stat(filepath.Join(kubernetesDir, r)); err != nil {
			t.Errorf("%s lists %s: %v", kustomizeFile, r, err)
		}
	}
	for _, f := range manifestFiles(t) {
		base := filepath.Base(f)
		switch {
		case base == kustomizeFile:
		case strings.HasSuffix(base, exampleSuffix):
			// Applying placeholders would overwrite the real Secrets.
			if listed[base] {
				t.Errorf("%s lists %s: its placeholders would replace the real Secrets on every apply", kustomizeFile, base)
			}
		case !listed[base]:
			t.Errorf("%s is not listed in %s", base, kustomizeFile)
		}
	}
	if k.Namespace != namespace {
		t.Errorf("kustomization namespace %q, want %q", k.Namespace, namespace)
	}
}

func TestImagesAgree(t *testing.T) {
	all := loadAll(t)
	images := map[string][]string{} // image → containers
	for _, w := range workloads(all) {
		for _, c := range allContainers(&w.pod.Spec) {
			if strings.HasPrefix(c.Image, imageRepo+":") || strings.HasPrefix(c.Image, imageRepo+"@") {
				images[c.Image] = append(images[c.Image], w.m.name+"/"+c.Name)
			}
			if !strings.Contains(c.Image, ":") || strings.HasSuffix(c.Image, ":latest") {
				t.Errorf("%s/%s image %q has no pinned tag", w.m.name, c.Name, c.Image)
			}
		}
	}
	if len(images) != 1 {
		t.Fatalf("want one gpuwarden image across the manifests, got %v", images)
	}
	image := slices.Collect(maps.Keys(images))[0]
	if got := len(images[image]); got < 2 {
		t.Errorf("image %s is used by %v, want the agent and the server", image, images[image])
	}
	tag := strings.TrimPrefix(image, imageRepo+":")

	ms, err := decodeFile(filepath.Join(kubernetesDir, kustomizeFile))
	if err != nil {
		t.Fatal(err)
	}
	k := ms[0].obj.(*kustomization)
	var kimages []string
	for _, i := range k.Images {
		kimages = append(kimages, i.Name+":"+i.NewTag)
	}
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	runChecks(t, []check{
		{"kustomization images", kimages, []string{imageRepo + ":" + tag}},
		{"Dockerfile builds the same image", bytes.Contains(df, []byte("-t "+image)), true},
	})
}

// The metric names the rules may use: the agent's and the fleet server's
// (see the README and http/ and the server's metrics), and Prometheus' up.
var knownMetrics = []string{
	"up",
	// agent
	"gpuwarden_gpu_utilization_ratio", "gpuwarden_idle", "gpuwarden_idle_seconds",
	"gpuwarden_cost_total", "gpuwarden_cost_forecast", "gpuwarden_budget_limit",
	"gpuwarden_cost_hourly_rate", "gpuwarden_diagnosis", "gpuwarden_notices_total", "gpuwarden_notice_source_up",
	"gpuwarden_node_info", "gpuwarden_gpu_xid_errors_total", "gpuwarden_gpu_ecc_errors_total",
	"gpuwarden_gpu_row_remap_pending", "gpuwarden_gpu_row_remap_failed", "gpuwarden_gpu_pcie_replays_total",
	// fleet server
	"gpuwarden_fleet_nodes", "gpuwarden_fleet_orphans", "gpuwarden_fleet_spend_month",
	"gpuwarden_fleet_budget", "gpuwarden_fleet_forecast_month", "gpuwarden_fleet_heartbeats_total",
	"gpuwarden_fleet_node_info", "gpuwarden_fleet_orphan",
}

// knownHistograms are exposed as NAME_bucket, NAME_sum and NAME_count.
var knownHistograms = []string{"gpuwarden_fleet_ingest_seconds"}

func metricKnown(name string) bool {
	if slices.Contains(knownMetrics, name) {
		return true
	}
	for _, h := range knownHistograms {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if name == h+suffix {
				return true
			}
		}
	}
	return false
}

// promQLWords are the PromQL functions, aggregations and keywords the
// rules may use; anything else that is not a known metric is a typo.
var promQLWords = []string{
	"sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "count_values", "group", "stddev", "stdvar",
	"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
	"rate", "irate", "increase", "delta", "deriv", "predict_linear", "histogram_quantile", "absent", "absent_over_time",
	"avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "count_over_time", "last_over_time",
	"changes", "resets", "clamp_min", "clamp_max", "abs", "time", "timestamp", "vector", "scalar", "label_replace",
}

var (
	promString     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers   = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges     = regexp.MustCompile(`\[[^\[\]]*\]`)
	promOffsets    = regexp.MustCompile(`\boffset\s+[0-9]+[smhdwy]+`)
	promLabelLists = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent      = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promNumber     = regexp.MustCompile(`\b\d+(\.\d+)?([eE][+-]?\d+)?\b`)
	gpuwardenName  = regexp.MustCompile(`\bgpuwarden_[a-z_]+`)
)

// exprMetrics returns the metric names an expression reads and the words
// in it that are neither a metric nor PromQL.
func exprMetrics(expr string) (metrics, unknown []string) {
	s := promString.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promOffsets.ReplaceAllString(s, " offset ")
	s = promLabelLists.ReplaceAllString(s, " ")
	s = promNumber.ReplaceAllString(s, " ")
	for _, id := range promIdent.FindAllString(s, -1) {
		switch {
		case slices.Contains(promQLWords, id):
		case metricKnown(id):
			metrics = append(metrics, id)
		default:
			unknown = append(unknown, id)
		}
	}
	// The plain search the brief asks for, over the raw text: catches a
	// gpuwarden_ name the stripping above would have hidden.
	for _, n := range gpuwardenName.FindAllString(expr, -1) {
		if !metricKnown(n) && !slices.Contains(unknown, n) {
			unknown = append(unknown, n)
		}
	}
	return metrics, unknown
}

func TestExprMetrics(t *testing.T) {
	tests := []struct {
		expr             string
		metrics, unknown []string
	}{
		{`gpuwarden_idle == 1`, []string{"gpuwarden_idle"}, nil},
		{`up{namespace="gpuwarden", pod=~"gpuwarden-agent-.*"} == 0`, []string{"up"}, nil},
		{`sum by (project) (max by (project, reason) (gpuwarden_fleet_orphans)) > 0`, []string{"gpuwarden_fleet_orphans"}, nil},
		{`histogram_quantile(0.99, sum by (le) (rate(gpuwarden_fleet_ingest_seconds_bucket[5m]))) > 0.05`, []string{"gpuwarden_fleet_ingest_seconds_bucket"}, nil},
		{`gpuwarden_fleet_node > 0`, nil, []string{"gpuwarden_fleet_node"}},
		{`sum(gpuwardn_idle) > 0`, nil, []string{"gpuwardn_idle"}},
		{`gpuwarden_fleet_ingest_seconds > 1`, nil, []string{"gpuwarden_fleet_ingest_seconds"}},
		{`up{job="gpuwarden_agent"} == 0`, []string{"up"}, []string{"gpuwarden_agent"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			metrics, unknown := exprMetrics(tt.expr)
			if fmt.Sprint(metrics) != fmt.Sprint(tt.metrics) || fmt.Sprint(unknown) != fmt.Sprint(tt.unknown) {
				t.Errorf("got metrics %v unknown %v, want %v and %v", metrics, unknown, tt.metrics, tt.unknown)
			}
		})
	}
}

// ruleFile is Prometheus' rule file format, as much of it as the rules use;
// decoding is strict, so a misspelt key fails.
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert         string            `json:"alert,omitempty"`
			Record        string            `json:"record,omitempty"`
			Expr          string            `json:"expr"`
			For           string            `json:"for,omitempty"`
			KeepFiringFor string            `json:"keep_firing_for,omitempty"`
			Labels        map[string]string `json:"labels,omitempty"`
			Annotations   map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// alertTemplate parses an annotation as Prometheus does, with the variables
// it defines and stand-ins for its functions: a syntax error fails here
// instead of at alert time.
func alertTemplate(text string) error {
	stub := func(v any) string { return fmt.Sprint(v) }
	funcs := template.FuncMap{
		"humanize": stub, "humanize1024": stub, "humanizeDuration": stub, "humanizePercentage": stub,
		"humanizeTimestamp": stub, "toUpper": strings.ToUpper, "toLower": strings.ToLower,
		"title": stub, "reReplaceAll": func(a, b, c string) string { return c }, "printf": fmt.Sprintf,
		"first": stub, "label": func(string, any) string { return "" }, "value": stub, "query": stub,
		"safeHtml": stub, "match": func(string, string) bool { return true },
	}
	const defs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}"
	_, err := template.New("annotation").Funcs(funcs).Option("missingkey=zero").Parse(defs + text)
	return err
}

func TestPrometheusRules(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if len(rf.Groups) == 0 {
		t.Fatalf("%s: no groups", rulesFile)
	}
	type alertInfo struct{ severity, forDur, expr string }
	alerts := map[string]alertInfo{}
	groups := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q is empty or repeated", g.Name)
		}
		groups[g.Name] = true
		for _, r := range g.Rules {
			t.Run(g.Name+"/"+r.Alert, func(t *testing.T) {
				if r.Alert == "" || r.Record != "" {
					t.Fatalf("want an alerting rule, got alert %q record %q", r.Alert, r.Record)
				}
				if _, dup := alerts[r.Alert]; dup {
					t.Errorf("alert %s defined twice", r.Alert)
				}
				alerts[r.Alert] = alertInfo{r.Labels["severity"], r.For, r.Expr}
				metrics, unknown := exprMetrics(r.Expr)
				if len(metrics) == 0 {
					t.Errorf("expr reads no known metric: %s", r.Expr)
				}
				if len(unknown) > 0 {
					t.Errorf("expr uses unknown names %v: %s", unknown, r.Expr)
				}
				if err := balanced(r.Expr); err != nil {
					t.Errorf("expr %s: %v", r.Expr, err)
				}
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("for %q: %v", r.For, err)
				}
				if s := r.Labels["severity"]; s != "warning" && s != "critical" && s != "info" {
					t.Errorf("severity label %q, want warning, critical or info", s)
				}
				if strings.TrimSpace(r.Annotations["summary"]) == "" {
					t.Error("no summary annotation")
				}
				for k, v := range r.Annotations {
					if err := alertTemplate(v); err != nil {
						t.Errorf("annotation %s: %v", k, err)
					}
				}
			})
		}
	}

	// The alerts the deployment promises, with their severity and the
	// threshold or window each must hold.
	tests := []struct {
		alert, severity, forDur string
		exprHas                 []string
	}{
		{"GPUWardenBudget80Percent", "warning", "", []string{"gpuwarden_fleet_spend_month", "gpuwarden_fleet_budget", "> 0.8"}},
		{"GPUWardenBudgetExceeded", "critical", "", []string{"gpuwarden_fleet_spend_month", "gpuwarden_fleet_budget", "> 1"}},
		{"GPUWardenBudgetForecastExceeded", "warning", "", []string{"gpuwarden_fleet_forecast_month", "gpuwarden_fleet_budget"}},
		{"GPUWardenBoxIdle", "warning", "30m", []string{"gpuwarden_idle == 1"}},
		{"GPUWardenOrphanedNodes", "warning", "1h", []string{"gpuwarden_fleet_orphan)", "by (node,", "> 0"}},
		{"GPUWardenNodesLost", "critical", "", []string{`gpuwarden_fleet_node_info{state="lost"}`, "by (node,"}},
		{"GPUWardenAgentDown", "warning", "", []string{"up{", "== 0"}},
		{"GPUWardenNoticeSourceDown", "warning", "5m", []string{"gpuwarden_notice_source_up == 0"}},
	}
	for _, tt := range tests {
		t.Run("promised/"+tt.alert, func(t *testing.T) {
			a, ok := alerts[tt.alert]
			if !ok {
				t.Fatalf("no alert %s", tt.alert)
			}
			if a.severity != tt.severity {
				t.Errorf("severity %q, want %q", a.severity, tt.severity)
			}
			if tt.forDur != "" && a.forDur != tt.forDur {
				t.Errorf("for %q, want %q", a.forDur, tt.forDur)
			}
			for _, s := range tt.exprHas {
				if !strings.Contains(a.expr, s) {
					t.Errorf("expr does not contain %q: %s", s, a.expr)
				}
			}
		})
	}
}

// balanced reports unbalanced brackets and quotes in a PromQL expression,
// the slip a YAML block scalar most often hides.
func balanced(expr string) error {
	s := promString.ReplaceAllString(expr, "S")
	if strings.ContainsAny(s, "\"'`") {
		return errors.New("unterminated string")
	}
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, r := range s {
		switch r {
		case '(', '[', '{':
			stack = append(stack, r)
		case ')', ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return nil
}

// TestDockerfile checks the image against what the manifests expect of it:
// cgo on (go-nvml needs it), a non-root default user for the server, the
// binary as entrypoint and the ports the pods expose.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var froms, users, exposed []string
	var code bytes.Buffer // the instructions, without comments
	entrypoint := ""
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		code.WriteString(line)
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, fields[1])
		case "USER":
			users = append(users, fields[1])
		case "EXPOSE":
			exposed = append(exposed, fields[1:]...)
		case "ENTRYPOINT":
			entrypoint = strings.Join(fields[1:], " ")
		}
	}
	lastUser := "<none>"
	if len(users) > 0 {
		lastUser = users[len(users)-1]
	}
	user, _, _ := strings.Cut(lastUser, ":")
	all := loadAll(t)
	var ports []string
	for _, name := range []string{agentName, serverName} {
		for _, w := range workloads(all) {
			if w.m.name == name {
				for _, c := range w.pod.Spec.Containers {
					for _, p := range c.Ports {
						ports = append(ports, strconv.Itoa(int(p.ContainerPort)))
					}
				}
			}
		}
	}
	runChecks(t, []check{
		{"multi-stage build", len(froms) >= 2, true},
		{"builds with cgo", bytes.Contains(code.Bytes(), []byte("CGO_ENABLED=1")), true},
		{"never with cgo off", bytes.Contains(code.Bytes(), []byte("CGO_ENABLED=0")), false},
		{"default user is not root", user != "<none>" && user != "root" && user != "0", true},
		{"entrypoint", entrypoint, `["/usr/local/bin/gpuwarden"]`},
		{"exposes the agent's and the server's ports", exposed, ports},
	})
}

// tokenInLog matches a sentence that sends a token to a log: printed or
// shown on stderr or in a log, read back with `kubectl logs`, or printed
// by the server on its first start.
var tokenInLog = regexp.MustCompile(`(?i)token\b[^.]*\b(print|prints|printed|shown|shows)\b[^.]*\b(stderr|log|logs)\b|` +
	`(print|prints|printed|shown|shows)\b[^.]*\btoken\b[^.]*\b(stderr|log|logs)\b|kubectl\b[^.\n]*\blogs\b[^.]*\btoken|` +
	// The server's output is its log: what it prints on its first start.
	`\bfirst start\b[^.]*\b(print|prints|printed|shows|shown)\b[^.]*\btoken`)

// TestReadmesKeepTokensOutOfLogs keeps the documentation from telling
// anyone that the fleet's admin token is printed to a log (journald,
// kubectl logs, CI): it goes to a file, a pipe or a Secret.
func TestReadmesKeepTokensOutOfLogs(t *testing.T) {
	for _, path := range []string{filepath.Join(kubernetesDir, "README.md"), filepath.Join("..", "README.md")} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Sentences run across lines; a blank line ends a paragraph.
		for _, para := range strings.Split(string(b), "\n\n") {
			text := strings.Join(strings.Fields(para), " ")
			for _, sentence := range strings.SplitAfter(text, ". ") {
				if negated.MatchString(sentence) {
					continue
				}
				if m := tokenInLog.FindString(sentence); m != "" {
					t.Errorf("%s says a token goes to the log (%q):\n%s", path, m, sentence)
				}
			}
		}
	}
}

// negated matches a sentence that says a token is never, or only on a
// terminal, printed.
var negated = regexp.MustCompile(`(?i)\b(never|not|no|only when|nothing)\b`)

// TestKubernetesBootstrapIsDocumented checks that the Kubernetes page makes
// the first admin token the way the Deployment expects: with token create
// --bootstrap, piped into a Secret rather than printed.
func TestKubernetesBootstrapIsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(kubernetesDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	bootstrap := regexp.MustCompile(`token create --bootstrap --db "\$GPUWARDEN_DB"'\s*\|\s*kubectl -n gpuwarden create secret generic \S+ --from-file=token=/dev/stdin`)
	if !bootstrap.MatchString(text) {
		t.Errorf("%s/README.md does not pipe `token create --bootstrap` into a Secret", kubernetesDir)
	}
}

// instruction is one Dockerfile instruction with its continuation lines
// joined, as BuildKit reads it.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, USER …
	args string
}

// parseDockerfile reads instructions, skipping comments and joining lines
// that end in a backslash.
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur *instruction
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur == nil) {
			continue
		}
		cont := strings.HasSuffix(trimmed, "\\")
		trimmed = strings.TrimSpace(strings.TrimSuffix(trimmed, "\\"))
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else {
			cur.args += " " + trimmed
		}
		if !cont {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: the last instruction ends in a backslash", path, cur.line)
	}
	return out
}

// finalStage is the instructions after the last FROM: the image that ships.
func finalStage(ins []instruction) []instruction {
	for i := len(ins) - 1; i >= 0; i-- {
		if ins[i].cmd == "FROM" {
			return ins[i+1:]
		}
	}
	return ins
}

// labelArgs reads a LABEL's key="value" pairs.
var labelPair = regexp.MustCompile(`([a-z0-9.\-]+)="([^"]*)"`)

// TestDockerfileRunsAsItsOwnUser checks what `up` and `server` need in the
// image without running docker: a non-root user that owns the data folder
// the binary picks by default ($XDG_STATE_HOME/gpuwarden for a user other
// than root), a volume there, and the OCI labels filled from build args.
func TestDockerfileRunsAsItsOwnUser(t *testing.T) {
	final := finalStage(parseDockerfile(t, dockerfile))
	var user, xdg, volume string
	var runs []string
	labels := map[string]string{}
	args := map[string]bool{}
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENV":
			if k, v, ok := strings.Cut(in.args, "="); ok && k == "XDG_STATE_HOME" {
				xdg = v
			}
		case "VOLUME":
			volume = in.args
		case "RUN":
			runs = append(runs, in.args)
		case "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			args[name] = true
		case "LABEL":
			for _, m := range labelPair.FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = m[2]
			}
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	dataDir := filepath.Join(xdg, "gpuwarden")
	run := strings.Join(runs, " && ")
	created := regexp.MustCompile(`mkdir -p (\S+)`).FindAllStringSubmatch(run, -1)
	var mkdirs []string
	for _, m := range created {
		mkdirs = append(mkdirs, m[1])
	}
	checks := []check{
		{"user is set and not root", uid != "" && uid != "0" && uid != "root", true},
		{"the data folder is the binary's default for that user", dataDir, "/var/lib/gpuwarden"},
		{"the data folder is created", slices.Contains(mkdirs, dataDir), true},
		{"the data folder is owned by the user", strings.Contains(run, "chown "+user+" "+dataDir) ||
			strings.Contains(run, "chown "+uid+":"+uid+" "+dataDir), true},
		{"the data folder is a volume", volume, dataDir},
	}
	for _, key := range []string{"title", "description", "source", "licenses", "version", "revision"} {
		v, ok := labels["org.opencontainers.image."+key]
		checks = append(checks, check{"label " + key, ok && v != "", true})
		if arg, isArg := strings.CutPrefix(v, "${"); isArg {
			arg = strings.TrimSuffix(arg, "}")
			checks = append(checks, check{"label " + key + " comes from a build arg of the final stage", args[arg], true})
		}
	}
	checks = append(checks,
		check{"version label", labels["org.opencontainers.image.version"], "${VERSION}"},
		check{"revision label", labels["org.opencontainers.image.revision"], "${COMMIT}"})
	runChecks(t, checks)
}

// TestImageRunsUpAndServerAsItsUser builds the image and runs `up` and
// `server` in it as the image's user, with the default data folder; it
// needs a docker daemon and GPUWARDEN_DOCKER_TESTS=1.
func TestImageRunsUpAndServerAsItsUser(t *testing.T) {
	if os.Getenv("GPUWARDEN_DOCKER_TESTS") != "1" {
		t.Skip("set GPUWARDEN_DOCKER_TESTS=1 (and have docker) to build and run the image")
	}
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return string(out), err
	}
	if out, err := docker("info"); err != nil {
		t.Fatalf("docker info: %v\n%s", err, out)
	}
	tag := "gpuwarden-test:" + strconv.Itoa(os.Getpid())
	if out, err := docker("build", "-f", "Dockerfile", "-t", tag, "--build-arg", "VERSION=0.0.0-test", "--build-arg", "COMMIT=test", ".."); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = docker("rmi", "-f", tag) })
	out, err := docker("image", "inspect", "--format", `{{index .Config.Labels "org.opencontainers.image.version"}} {{.Config.User}}`, tag)
	if err != nil || strings.TrimSpace(out) != "0.0.0-test 65532:65532" {
		t.Errorf("image labels/user: %q, %v; want \"0.0.0-test 65532:65532\"", out, err)
	}
	tests := []struct {
		name, want string
		args       []string
	}{
		{"up", "agent up", []string{"up", "--simulate", "1xH100", "--listen", "", "--idle-window", "2s", "--dry-run"}},
		{"server", "fleet server up", []string{"server", "--listen", "127.0.0.1:8080"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// timeout ends the command after 5 s (exit 124): it ran that long without failing.
			args := append([]string{"run", "--rm", "--entrypoint", "timeout", tag, "5", "/usr/local/bin/gpuwarden"}, tt.args...)
			out, err := docker(args...)
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 124) {
				t.Fatalf("docker run: %v\n%s", err, out)
			}
			if !strings.Contains(out, tt.want) || strings.Contains(out, "permission denied") {
				t.Errorf("want %q and no permission error:\n%s", tt.want, out)
			}
		})
	}
}
