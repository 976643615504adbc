package deploy_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuwarden/gpuwarden/internal/peertest"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../charts/gpuwarden"

// helmBinary finds helm (scripts/install-peers.sh builds it from the Go
// module proxy): a skip without it, a failure where CI requires peers.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin, err := peertest.Binary("helm")
	if err != nil {
		if os.Getenv(peertest.RequireEnv) == "1" {
			t.Fatalf("helm not available (%v): run scripts/install-peers.sh", err)
		}
		t.Skipf("helm not available (%v): run scripts/install-peers.sh", err)
	}
	return bin
}

// helmTemplate renders the chart as release gpuwarden in namespace
// gpuwarden with extra --set values, and decodes every object strictly.
func helmTemplate(t *testing.T, helm string, set ...string) ([]manifest, []byte) {
	t.Helper()
	args := []string{"template", "gpuwarden", chartDir, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	path := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := decodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return ms, out
}

// kustomized is what `kubectl kustomize deploy/kubernetes` renders, for the
// transformers kustomization.yaml uses: its resources, the namespace set on
// each object, and the images' newName/newTag/digest. (kubectl kustomize is
// not available here; kustomization is decoded strictly, so a transformer
// this does not apply fails to decode instead of being ignored.)
func kustomized(t *testing.T) []manifest {
	t.Helper()
	ms, err := decodeFile(filepath.Join(kubernetesDir, kustomizeFile))
	if err != nil {
		t.Fatal(err)
	}
	k := ms[0].obj.(*kustomization)
	var out []manifest
	for _, r := range k.Resources {
		rs, err := decodeFile(filepath.Join(kubernetesDir, r))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rs {
			if o, ok := m.obj.(metav1.Object); ok && k.Namespace != "" && m.kind != "Namespace" {
				o.SetNamespace(k.Namespace)
			}
			if w := podSpecOf(m.obj); w != nil {
				for i := range w.Containers {
					w.Containers[i].Image = kustomizeImage(w.Containers[i].Image, k)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func kustomizeImage(image string, k *kustomization) string {
	name, tag, _ := strings.Cut(image, ":")
	for _, im := range k.Images {
		if im.Name != name {
			continue
		}
		if im.NewName != "" {
			name = im.NewName
		}
		if im.NewTag != "" {
			tag = im.NewTag
		}
		if im.Digest != "" {
			return name + "@" + im.Digest
		}
	}
	return name + ":" + tag
}

func podSpecOf(obj any) *corev1.PodSpec {
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return &o.Spec.Template.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &o.Spec.Template.Spec
	}
	return nil
}

// specOf is the part of a workload or Service that must be the same in
// both renderings: the whole spec (pod template with its labels and
// annotations, containers, images, args, ports, env, mounts, security
// contexts, volumes, probes, resources), as JSON for a readable diff.
func specOf(t *testing.T, obj any) string {
	t.Helper()
	var spec any
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		spec = o.Spec
	case *appsv1.Deployment:
		spec = o.Spec
	case *appsv1.StatefulSet:
		spec = o.Spec
	case *corev1.Service:
		spec = o.Spec
	default:
		return ""
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChartRendersTheManifests: `helm template` with the default values
// renders the same Deployments, DaemonSets, StatefulSets and Services as
// deploy/kubernetes, down to every field of their specs, in the same
// namespace; the chart's metadata labels only add Helm's own.
func TestChartRendersTheManifests(t *testing.T) {
	helm := helmBinary(t)
	if out, err := exec.Command(helm, "lint", "--strict", chartDir).CombinedOutput(); err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	chart, _ := helmTemplate(t, helm)
	want := kustomized(t)
	key := func(m manifest) string { return m.kind + "/" + m.name }
	compared := map[string]bool{}
	for _, k := range want {
		if specOf(t, k.obj) == "" {
			continue // Namespace: Helm leaves namespaces to --create-namespace
		}
		compared[key(k)] = true
		t.Run(key(k), func(t *testing.T) {
			i := slices.IndexFunc(chart, func(c manifest) bool { return key(c) == key(k) })
			if i < 0 {
				t.Fatalf("the chart renders no %s", key(k))
			}
			c := chart[i]
			if got, want := specOf(t, c.obj), specOf(t, k.obj); got != want {
				t.Errorf("spec differs:\n%s", jsonLineDiff(want, got))
			}
			gm, km := c.obj.(metav1.Object), k.obj.(metav1.Object)
			if gm.GetNamespace() != km.GetNamespace() {
				t.Errorf("namespace %q, want %q", gm.GetNamespace(), km.GetNamespace())
			}
			for lk, lv := range km.GetLabels() {
				if gm.GetLabels()[lk] != lv {
					t.Errorf("label %s = %q, want %q", lk, gm.GetLabels()[lk], lv)
				}
			}
		})
	}
	for _, c := range chart {
		if specOf(t, c.obj) != "" && !compared[key(c)] {
			t.Errorf("the chart renders %s, which deploy/kubernetes does not have", key(c))
		}
	}
	if len(compared) < 5 {
		t.Errorf("compared %d objects, want the agent, the server and its Service, postgres and its Service", len(compared))
	}
}

// jsonLineDiff lists the lines only one side has.
func jsonLineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestChartOptions: each value the chart offers lands where it must.
func TestChartOptions(t *testing.T) {
	helm := helmBinary(t)
	t.Run("defaults render no operator objects and no policies", func(t *testing.T) {
		ms, _ := helmTemplate(t, helm)
		for _, m := range ms {
			if m.kind == "NetworkPolicy" || m.kind == "Secret" {
				t.Errorf("default render has %s", m)
			}
		}
	})
	t.Run("scheduling and database", func(t *testing.T) {
		ms, _ := helmTemplate(t, helm, "agent.priorityClassName=gpu-critical", "server.priorityClassName=fleet",
			"agent.nodeSelector.pool=gpu", "agent.tolerations[0].key=dedicated", "agent.tolerations[0].operator=Exists",
			"database.existingSecret=managed-db", "database.secretKey=url", "postgres.enabled=false")
		ds := find[*appsv1.DaemonSet](t, ms, agentName)
		dep := find[*appsv1.Deployment](t, ms, serverName)
		dsn := envVar(container(t, &dep.Spec.Template.Spec, "server"), "GPUWARDEN_DB")
		runChecks(t, []check{
			{"agent priorityClassName", ds.Spec.Template.Spec.PriorityClassName, "gpu-critical"},
			{"server priorityClassName", dep.Spec.Template.Spec.PriorityClassName, "fleet"},
			{"agent nodeSelector (merged with the default)", ds.Spec.Template.Spec.NodeSelector, map[string]string{"pool": "gpu", gpuNodeLabel: "true"}},
			{"agent tolerations", len(ds.Spec.Template.Spec.Tolerations) == 1 && ds.Spec.Template.Spec.Tolerations[0].Key == "dedicated", true},
			{"dsn secret", dsn != nil && dsn.ValueFrom.SecretKeyRef.Name == "managed-db" && dsn.ValueFrom.SecretKeyRef.Key == "url", true},
			{"no bundled postgres", slices.ContainsFunc(ms, func(m manifest) bool { return m.kind == "StatefulSet" }), false},
		})
	})
	t.Run("dsn in values makes the secret", func(t *testing.T) {
		ms, _ := helmTemplate(t, helm, "database.dsn=postgres://u:p@db:5432/gw")
		s := find[*corev1.Secret](t, ms, "gpuwarden-db")
		if s.StringData["dsn"] != "postgres://u:p@db:5432/gw" {
			t.Errorf("secret stringData = %v", s.StringData)
		}
	})
	t.Run("monitoring and network policy", func(t *testing.T) {
		out := renderRaw(t, helm, "monitoring.podMonitor.enabled=true", "monitoring.serviceMonitor.enabled=true",
			"monitoring.rules.enabled=true", "monitoring.rules.dcgmCompat=true", "networkPolicy.enabled=true")
		// Decoded strictly into prometheus-operator's and Kubernetes' own
		// types: a misspelt field fails here, not when the operator skips it.
		var (
			pm       monitoringv1.PodMonitor
			sm       monitoringv1.ServiceMonitor
			pr       monitoringv1.PrometheusRule
			policies = map[string]networkingv1.NetworkPolicy{}
		)
		for _, doc := range splitDocuments(out) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatal(err)
			}
			var into any
			switch tm.Kind {
			case "PodMonitor":
				into = &pm
			case "ServiceMonitor":
				into = &sm
			case "PrometheusRule":
				into = &pr
			case "NetworkPolicy":
				into = &networkingv1.NetworkPolicy{}
			default:
				continue
			}
			if err := yaml.UnmarshalStrict(doc, into); err != nil {
				t.Fatalf("%s: %v\n%s", tm.Kind, err, doc)
			}
			if tm.Kind == "NetworkPolicy" {
				np := into.(*networkingv1.NetworkPolicy)
				policies[np.Name] = *np
			} else if tm.APIVersion != "monitoring.coreos.com/v1" {
				t.Errorf("%s apiVersion %s, want monitoring.coreos.com/v1", tm.Kind, tm.APIVersion)
			}
		}
		if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil ||
			*pm.Spec.PodMetricsEndpoints[0].Port != "http" || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
			t.Errorf("PodMonitor endpoints %+v, want port http path /metrics", pm.Spec.PodMetricsEndpoints)
		}
		if pm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != agentName {
			t.Errorf("PodMonitor selects %v, want the agent pods", pm.Spec.Selector.MatchLabels)
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
		}
		ep := sm.Spec.Endpoints[0]
		runChecks(t, []check{
			{"servicemonitor port", ep.Port, "https"},
			{"servicemonitor selects the server", sm.Spec.Selector.MatchLabels["app.kubernetes.io/name"], serverName},
			{"servicemonitor token", ep.Authorization != nil && ep.Authorization.Credentials != nil && ep.Authorization.Credentials.Name == "gpuwarden-metrics-token", true},
			{"servicemonitor checks the certificate against the Service name", ep.TLSConfig != nil && ep.TLSConfig.ServerName != nil && *ep.TLSConfig.ServerName == serverName+"."+namespace+".svc", true},
		})
		for _, name := range []string{agentName, serverName, "gpuwarden-postgres"} {
			if _, ok := policies[name]; !ok {
				t.Errorf("no NetworkPolicy %s", name)
			}
		}
		if np, ok := policies["gpuwarden-postgres"]; ok {
			from := np.Spec.Ingress[0].From
			if len(from) != 1 || from[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != serverName {
				t.Errorf("postgres admits %+v, want the server only", from)
			}
		}

		// The PrometheusRule holds rules.yaml's groups and the DCGM ones, as they are.
		var alerts, compat ruleFile
		for f, rf := range map[string]*ruleFile{rulesFile: &alerts, dcgmCompatFile: &compat} {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(data, rf); err != nil {
				t.Fatal(err)
			}
		}
		spec, _ := json.Marshal(pr.Spec)
		var got ruleFile
		if err := json.Unmarshal(spec, &got); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(alerts.Groups), compat.Groups...)
		if !reflect.DeepEqual(got.Groups, want) {
			t.Errorf("PrometheusRule groups differ from %s + %s", rulesFile, dcgmCompatFile)
		}
	})
}

func renderRaw(t *testing.T, helm string, set ...string) []byte {
	t.Helper()
	args := []string{"template", "gpuwarden", chartDir, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return out
}

// TestChartCopiesAgree needs no helm: the chart's rule files are copies of
// deploy/prometheus's (a chart cannot read outside itself), and its
// appVersion is the release kustomization.yaml deploys.
func TestChartCopiesAgree(t *testing.T) {
	for _, f := range []string{"rules.yaml", "dcgm-compat.rules.yaml"} {
		a, err := os.ReadFile(filepath.Join("prometheus", f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(chartDir, "files", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s/files/%s differs from deploy/prometheus/%s: cp deploy/prometheus/%s %s/files/", chartDir, f, f, f, chartDir)
		}
	}
	var chart struct {
		APIVersion  string   `json:"apiVersion"`
		Name        string   `json:"name"`
		Description string   `json:"description"`
		Type        string   `json:"type"`
		Version     string   `json:"version"`
		AppVersion  string   `json:"appVersion"`
		Home        string   `json:"home"`
		Keywords    []string `json:"keywords"`
	}
	decodeStrict(t, filepath.Join(chartDir, "Chart.yaml"), &chart)
	ms, err := decodeFile(filepath.Join(kubernetesDir, kustomizeFile))
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]bool{}
	for _, im := range ms[0].obj.(*kustomization).Images {
		tags[im.NewTag] = true
	}
	if !tags[chart.AppVersion] || len(tags) != 1 {
		t.Errorf("Chart.yaml appVersion %q, kustomization.yaml tags %v: they must agree", chart.AppVersion, slices.Collect(maps.Keys(tags)))
	}
}
