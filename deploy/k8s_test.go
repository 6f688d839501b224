package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// overlay is one built and decoded overlay.
type overlay struct {
	name string
	objs []Object
}

// built runs kustomize once per test binary; the tests share the result.
var built = sync.OnceValues(func() ([]overlay, error) {
	r, err := Root()
	if err != nil {
		return nil, err
	}
	dirs, err := Overlays(r)
	if err != nil {
		return nil, err
	}
	if len(dirs) < 2 {
		return nil, fmt.Errorf("overlays %v: want dev and prod", dirs)
	}
	var out []overlay
	for _, dir := range dirs {
		y, err := Kustomize(context.Background(), dir)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(y)
		if err != nil {
			return nil, fmt.Errorf("overlay %s: %w", filepath.Base(dir), err)
		}
		out = append(out, overlay{name: filepath.Base(dir), objs: objs})
	}
	return out, nil
})

func buildOverlays(t *testing.T) []overlay {
	t.Helper()
	out, err := built()
	if errors.Is(err, ErrNoKubectl) {
		t.Skip("SKIP: kubectl is not installed; the Kubernetes manifests are NOT checked")
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func typed[T any](objs []Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.Typed.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func custom(objs []Object, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.Typed == nil && o.GVK.Kind == kind {
			out = append(out, o.Unstructured)
		}
	}
	return out
}

func TestKustomizeOverlays(t *testing.T) {
	t.Parallel()
	for _, o := range buildOverlays(t) {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			checkDeployments(t, o.objs)
			checkPDBs(t, o.objs)
			checkScaling(t, o.name, o.objs)
			checkServices(t, o.objs)
			checkServiceMonitors(t, o.objs)
			checkNetworkPolicies(t, o.objs)
			checkMigrateJob(t, o.objs)
			checkSecrets(t, o.objs)
			checkStoreCredentials(t, o.objs)
			checkPseudonymKey(t, o.objs)
			checkRouterProvider(t, o.objs)
			checkSkillsMounts(t, o.objs)
			checkDownloadEgress(t, o.objs)
			checkImages(t, o.name, o.objs)
		})
	}
}

// checkImages: every Switchboard container of an overlay, the base's
// Deployments and migrate Job as much as the components' gateways, runs
// the image the overlay's `images` entry names. An images transformer
// in the base would rename the base's containers before the overlay's
// entry (`name: switchboard`) sees them: the overlay would pin only its
// components, and prod would run two releases side by side.
func checkImages(t *testing.T, overlay string, objs []Object) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, OverlaysDir, overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("overlay %s: %v", overlay, err)
	}
	want := ""
	for _, img := range k.Images {
		if img.Name == "switchboard" {
			want = img.NewName + ":" + img.NewTag
		}
	}
	if want == "" {
		t.Fatalf("overlay %s: no images entry for switchboard", overlay)
	}
	for _, o := range objs {
		spec := PodSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if IsSwitchboardImage(c.Image) && c.Image != want {
				t.Errorf("overlay %s: %s %s runs %s, want the overlay's %s", overlay, o.GVK.Kind, o.Name, c.Image, want)
			}
		}
	}
}

func checkDeployments(t *testing.T, objs []Object) {
	deps := typed[*appsv1.Deployment](objs)
	if len(deps) < 6 {
		t.Fatalf("%d Deployments, want one per service", len(deps))
	}
	seen := map[string]bool{}
	for _, d := range deps {
		spec := d.Spec.Template.Spec
		if len(spec.Containers) != 1 {
			t.Errorf("%s: %d containers, want 1", d.Name, len(spec.Containers))
			continue
		}
		c := spec.Containers[0]
		if !IsSwitchboardImage(c.Image) {
			continue
		}
		if len(c.Args) == 0 {
			t.Errorf("%s: no args (the image's entrypoint needs a command)", d.Name)
			continue
		}
		seen[strings.Join(c.Args[:min(2, len(c.Args))], " ")] = true
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v", d.Name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		checkProbes(t, d.Name, c)
		checkResources(t, d.Name, c.Resources)
		checkGrace(t, d.Name, spec, c, objs)
		if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: pod must set runAsNonRoot", d.Name)
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container must have a read-only root and no privilege escalation", d.Name)
		}
		checkConfigMount(t, d.Name, spec, c, objs)
	}
	for _, want := range []string{"router", "worker", "delivery", "admin", "gateway api", "gateway webhook"} {
		if !seen[want] {
			t.Errorf("no Deployment runs `switchboard %s`", want)
		}
	}
}

func checkProbes(t *testing.T, name string, c corev1.Container) {
	opsPort := false
	for _, p := range c.Ports {
		if p.Name == "ops" && p.ContainerPort == 9090 {
			opsPort = true
		}
	}
	if !opsPort {
		t.Errorf("%s: no container port ops:9090", name)
	}
	for kind, pr := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{
		"readiness": {c.ReadinessProbe, "/readyz"},
		"liveness":  {c.LivenessProbe, "/healthz"},
	} {
		p := pr.probe
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, kind)
			continue
		}
		port := p.HTTPGet.Port
		if p.HTTPGet.Path != pr.path || (port.String() != "ops" && port.IntValue() != 9090) {
			t.Errorf("%s: %s probe GET %s on %s, want %s on the ops port", name, kind, p.HTTPGet.Path, port.String(), pr.path)
		}
	}
}

func checkResources(t *testing.T, name string, r corev1.ResourceRequirements) {
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := r.Requests[res]
		lim, okLim := r.Limits[res]
		if !okReq || !okLim {
			t.Errorf("%s: %s request and limit required", name, res)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above limit %s", name, res, req.String(), lim.String())
		}
	}
}

// configDuration is a duration setting a container will use: the config
// file's value at path, overridden by its SWITCHBOARD_<A>__<B> variable.
func configDuration(t *testing.T, c corev1.Container, cfg map[string]any, def time.Duration, path ...string) time.Duration {
	d := def
	var node any = cfg
	for _, k := range path {
		m, _ := node.(map[string]any)
		node = m[k]
	}
	if v, ok := node.(string); ok {
		p, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s %q: %v", strings.Join(path, "."), v, err)
		}
		d = p
	}
	env := "SWITCHBOARD_" + strings.ToUpper(strings.Join(path, "__"))
	for _, e := range c.Env {
		if e.Name == env {
			p, err := time.ParseDuration(e.Value)
			if err != nil {
				t.Fatalf("%s %q: %v", env, e.Value, err)
			}
			d = p
		}
	}
	return d
}

// drainTimeout is what a worker container will use: the config file's
// worker.drain_timeout, overridden by SWITCHBOARD_WORKER__DRAIN_TIMEOUT.
func drainTimeout(t *testing.T, c corev1.Container, objs []Object, cfg map[string]any) time.Duration {
	d := workerDrain
	if w, ok := cfg["worker"].(map[string]any); ok {
		if s, ok := w["drain_timeout"].(string); ok {
			v, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("worker.drain_timeout %q: %v", s, err)
			}
			d = v
		}
	}
	for _, e := range c.Env {
		if e.Name == "SWITCHBOARD_WORKER__DRAIN_TIMEOUT" {
			v, err := time.ParseDuration(e.Value)
			if err != nil {
				t.Fatalf("SWITCHBOARD_WORKER__DRAIN_TIMEOUT %q: %v", e.Value, err)
			}
			d = v
		}
	}
	return d
}

func checkGrace(t *testing.T, name string, spec corev1.PodSpec, c corev1.Container, objs []Object) {
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	var preStop time.Duration
	if l := c.Lifecycle; l != nil && l.PreStop != nil {
		if l.PreStop.Sleep == nil {
			t.Errorf("%s: preStop must be a sleep action (the image has no shell)", name)
		} else {
			preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
		}
	}
	var drain time.Duration
	switch c.Args[0] {
	case "worker":
		drain = drainTimeout(t, c, objs, configFile(t, spec, objs))
	case "gateway":
		drain = gatewayDrain
		if len(c.Args) > 1 && c.Args[1] == "api" {
			// Its HTTP grace is configurable: the model's 10 s is the default.
			grace := configDuration(t, c, configFile(t, spec, objs), 10*time.Second, "gateways", "api", "shutdown_grace")
			drain += grace - 10*time.Second
		}
	}
	if grace < preStop+drain+10*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want at least preStop %v + drain %v + 10s", name, grace, preStop, drain)
	}
}

// configFile parses the config.yaml of the ConfigMap mounted in the pod.
func configFile(t *testing.T, spec corev1.PodSpec, objs []Object) map[string]any {
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, cm := range typed[*corev1.ConfigMap](objs) {
			if cm.Name != v.ConfigMap.Name {
				continue
			}
			if s, ok := cm.Data["config.yaml"]; ok {
				var cfg map[string]any
				if err := yaml.Unmarshal([]byte(s), &cfg); err != nil {
					t.Fatalf("ConfigMap %s config.yaml: %v", cm.Name, err)
				}
				return cfg
			}
		}
	}
	t.Fatal("no ConfigMap with config.yaml mounted")
	return nil
}

func checkConfigMount(t *testing.T, name string, spec corev1.PodSpec, c corev1.Container, objs []Object) {
	var cfgPath string
	for _, e := range c.Env {
		if e.Name == "SWITCHBOARD_CONFIG" {
			cfgPath = e.Value
		}
	}
	if cfgPath == "" {
		t.Errorf("%s: SWITCHBOARD_CONFIG not set", name)
		return
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == filepath.Dir(cfgPath) {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("%s: %s is not on a mounted volume", name, cfgPath)
	}
	cfg := configFile(t, spec, objs)
	for _, key := range []string{"nats", "redis", "ops"} {
		if _, ok := cfg[key]; !ok {
			t.Errorf("%s: config.yaml has no %s section", name, key)
		}
	}
	cms := map[string]bool{}
	for _, cm := range typed[*corev1.ConfigMap](objs) {
		cms[cm.Name] = true
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil && !cms[ef.ConfigMapRef.Name] {
			t.Errorf("%s: envFrom ConfigMap %s does not exist", name, ef.ConfigMapRef.Name)
		}
	}
}

func checkPDBs(t *testing.T, objs []Object) {
	pdbs := typed[*policyv1.PodDisruptionBudget](objs)
	for _, d := range typed[*appsv1.Deployment](objs) {
		n := 0
		for _, p := range pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatalf("PDB %s: %v", p.Name, err)
			}
			if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				n++
				if p.Spec.MinAvailable != nil {
					t.Errorf("PDB %s: minAvailable blocks node drains of small Deployments; use maxUnavailable", p.Name)
				}
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() < 1 {
					t.Errorf("PDB %s: want maxUnavailable >= 1", p.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("Deployment %s: %d PodDisruptionBudgets select it, want 1", d.Name, n)
		}
	}
}

// checkScaling: the agent workers are scaled by exactly one autoscaler,
// the HPA (base, dev) or KEDA on the worker-turns backlog (prod).
func checkScaling(t *testing.T, overlay string, objs []Object) {
	deployments := map[string]bool{}
	for _, d := range typed[*appsv1.Deployment](objs) {
		deployments[d.Name] = true
	}
	scaledBy := map[string][]string{}
	for _, h := range typed[*autoscalingv2.HorizontalPodAutoscaler](objs) {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || !deployments[ref.Name] {
			t.Errorf("HPA %s targets %s %s, not a Deployment here", h.Name, ref.Kind, ref.Name)
		}
		scaledBy[ref.Name] = append(scaledBy[ref.Name], "HorizontalPodAutoscaler/"+h.Name)
	}
	sos := custom(objs, "ScaledObject")
	for _, so := range sos {
		name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
		kind, found, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
		if (found && kind != "Deployment") || !deployments[name] {
			t.Errorf("ScaledObject %s targets %q %q, not a Deployment here", so.GetName(), kind, name)
		}
		scaledBy[name] = append(scaledBy[name], "ScaledObject/"+so.GetName())
		checkScaledObject(t, so)
	}
	for target, by := range scaledBy {
		if len(by) > 1 {
			t.Errorf("%s is scaled by %v: an HPA and a ScaledObject on one Deployment fight", target, by)
		}
	}
	if len(scaledBy["switchboard-agent-worker"]) != 1 {
		t.Errorf("agent workers: want exactly one autoscaler, have %v", scaledBy["switchboard-agent-worker"])
	}
	if overlay == "prod" && len(sos) == 0 {
		t.Error("prod: no KEDA ScaledObject for the agent workers")
	}
}

func checkScaledObject(t *testing.T, so *unstructured.Unstructured) {
	min, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	max, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	if min < 1 || max <= min {
		t.Errorf("ScaledObject %s: minReplicaCount %d, maxReplicaCount %d", so.GetName(), min, max)
	}
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(triggers) == 0 {
		t.Fatalf("ScaledObject %s: no triggers", so.GetName())
	}
	for _, tr := range triggers {
		m, _ := tr.(map[string]any)
		if m["type"] != "nats-jetstream" {
			t.Errorf("ScaledObject %s: trigger type %v, want nats-jetstream", so.GetName(), m["type"])
			continue
		}
		md, _ := m["metadata"].(map[string]any)
		want := map[string]string{"stream": "TURNS", "consumer": "worker-turns"}
		for k, v := range want {
			if md[k] != v {
				t.Errorf("ScaledObject %s: %s = %v, want %s", so.GetName(), k, md[k], v)
			}
		}
		for _, k := range []string{"natsServerMonitoringEndpoint", "account", "lagThreshold"} {
			if s, _ := md[k].(string); s == "" {
				t.Errorf("ScaledObject %s: trigger metadata %s missing (values must be strings)", so.GetName(), k)
			}
		}
	}
}

func checkServices(t *testing.T, objs []Object) {
	deps := typed[*appsv1.Deployment](objs)
	names := map[string]bool{}
	for _, s := range typed[*corev1.Service](objs) {
		names[s.Name] = true
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			if s.Spec.ExternalName == "" {
				t.Errorf("Service %s: ExternalName without a name", s.Name)
			}
			continue
		}
		sel := labels.SelectorFromSet(s.Spec.Selector)
		var match *appsv1.Deployment
		for _, d := range deps {
			if len(s.Spec.Selector) > 0 && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				match = d
			}
		}
		if match == nil {
			t.Errorf("Service %s selects no Deployment's pods", s.Name)
			continue
		}
		ports := map[string]bool{}
		for _, p := range match.Spec.Template.Spec.Containers[0].Ports {
			ports[p.Name] = true
		}
		for _, p := range s.Spec.Ports {
			if !ports[p.TargetPort.String()] {
				t.Errorf("Service %s port %s targets %s, not a named port of %s", s.Name, p.Name, p.TargetPort.String(), match.Name)
			}
			if p.TargetPort.String() != "ops" {
				checkPreStop(t, s.Name, p.Name, match)
			}
		}
	}
	for _, ext := range []string{"nats", "redis", "postgres"} {
		if !names[ext] {
			t.Errorf("no Service %q for the external %s", ext, ext)
		}
	}
}

func checkServiceMonitors(t *testing.T, objs []Object) {
	sms := custom(objs, "ServiceMonitor")
	if len(sms) == 0 {
		t.Fatal("no ServiceMonitor")
	}
	scraped := map[string]bool{}
	for _, sm := range sms {
		ml, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(ml) == 0 || len(eps) == 0 {
			t.Errorf("ServiceMonitor %s: needs selector.matchLabels and endpoints", sm.GetName())
			continue
		}
		var epPorts []string
		for _, e := range eps {
			m, _ := e.(map[string]any)
			p, _ := m["port"].(string)
			epPorts = append(epPorts, p)
		}
		for _, s := range typed[*corev1.Service](objs) {
			if !labels.SelectorFromSet(ml).Matches(labels.Set(s.Labels)) {
				continue
			}
			for _, p := range s.Spec.Ports {
				if slices.Contains(epPorts, p.Name) {
					scraped[s.Name] = true
				}
			}
		}
	}
	for _, d := range typed[*appsv1.Deployment](objs) {
		if !scraped[d.Name] {
			t.Errorf("Deployment %s: no ServiceMonitor scrapes a Service of it", d.Name)
		}
	}
}

func checkNetworkPolicies(t *testing.T, objs []Object) {
	nps := typed[*networkingv1.NetworkPolicy](objs)
	defaultDeny := false
	for _, np := range nps {
		if len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			defaultDeny = true
		}
	}
	if !defaultDeny {
		t.Error("no default-deny NetworkPolicy")
	}
	// Every pod reaches DNS, NATS, Redis, Postgres and the OTLP collector.
	stores := []int{53, 4222, 6379, 5432, 4317}
	for _, d := range typed[*appsv1.Deployment](objs) {
		for _, port := range stores {
			if !egressAllows(nps, d.Spec.Template.Labels, port) {
				t.Errorf("Deployment %s: no NetworkPolicy allows egress to port %d", d.Name, port)
			}
		}
		// A chat platform's gateway and the workers also reach the world
		// outside (the platform, the model); the API gateway only answers.
		component := d.Spec.Template.Labels["app.kubernetes.io/component"]
		outside := component == "agent-worker" || strings.HasPrefix(component, "gateway-") && component != "gateway-api"
		if outside && len(slices.DeleteFunc(egressPorts(nps, d.Spec.Template.Labels), func(p int) bool { return slices.Contains(stores, p) })) == 0 {
			t.Errorf("Deployment %s: no NetworkPolicy lets it reach its platform (only the stores)", d.Name)
		}
	}
}

func egressAllows(nps []*networkingv1.NetworkPolicy, podLabels map[string]string, port int) bool {
	return slices.Contains(egressPorts(nps, podLabels), port)
}

// egressPorts lists the ports the policies selecting a pod let it reach.
func egressPorts(nps []*networkingv1.NetworkPolicy, podLabels map[string]string) []int {
	var ports []int
	for _, np := range nps {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		for _, rule := range np.Spec.Egress {
			for _, p := range rule.Ports {
				if p.Port != nil {
					ports = append(ports, p.Port.IntValue())
				}
			}
		}
	}
	return ports
}

func checkMigrateJob(t *testing.T, objs []Object) {
	for _, j := range typed[*batchv1.Job](objs) {
		c := j.Spec.Template.Spec.Containers
		if len(c) == 1 && IsSwitchboardImage(c[0].Image) && len(c[0].Args) > 0 && c[0].Args[0] == "migrate" {
			if j.Spec.Template.Spec.RestartPolicy == corev1.RestartPolicyAlways {
				t.Errorf("Job %s: restartPolicy Always is invalid for a Job", j.Name)
			}
			checkResources(t, j.Name, c[0].Resources)
			// A Job's template is immutable: a generated (content-hashed)
			// ConfigMap in it would make every config change fail to apply.
			for _, v := range j.Spec.Template.Spec.Volumes {
				if v.ConfigMap != nil {
					t.Errorf("Job %s mounts ConfigMap %s: a config change would alter its immutable template", j.Name, v.ConfigMap.Name)
				}
			}
			for _, ef := range c[0].EnvFrom {
				if ef.ConfigMapRef != nil {
					t.Errorf("Job %s takes env from ConfigMap %s: a change would alter its immutable template", j.Name, ef.ConfigMapRef.Name)
				}
			}
			return
		}
	}
	t.Error("no Job runs `switchboard migrate`")
}

var secretName = regexp.MustCompile(`TOKEN|_KEY$|PASSWORD|SECRET|DATABASE_URL`)

// checkSecrets: tokens, keys and the database URL come from Secrets,
// never as literal values in a manifest.
func checkSecrets(t *testing.T, objs []Object) {
	for _, o := range objs {
		spec := PodSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			for _, e := range c.Env {
				if !secretName.MatchString(e.Name) {
					continue
				}
				if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					t.Errorf("%s %s: %s must be a secretKeyRef", o.GVK.Kind, o.Name, e.Name)
				}
			}
		}
	}
	for _, cm := range typed[*corev1.ConfigMap](objs) {
		for k := range cm.Data {
			if secretName.MatchString(k) {
				t.Errorf("ConfigMap %s holds %s: secrets belong in a Secret", cm.Name, k)
			}
		}
	}
}

// checkStoreCredentials: a container gets the credentials of only the
// stores its command opens. Gateways use only NATS, except the API
// gateway, whose jobs API (/api/jobs, gateways.api.jobs, on by default)
// keeps the cron jobs in Postgres; router, worker and delivery also use
// Postgres and Redis, admin Postgres and, for `sessions prune` (the
// session locks), Redis. REDIS_URL is optional (redis.url in config.yaml
// serves a Redis without a password).
func checkStoreCredentials(t *testing.T, objs []Object) {
	uses := map[string][]string{
		"router": {"DATABASE_URL", "REDIS_URL"}, "worker": {"DATABASE_URL", "REDIS_URL"},
		"delivery": {"DATABASE_URL", "REDIS_URL"}, "admin": {"DATABASE_URL", "REDIS_URL"}, "migrate": {"DATABASE_URL"},
		"gateway api": {"DATABASE_URL"},
	}
	for _, o := range objs {
		spec := PodSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range spec.Containers {
			if !IsSwitchboardImage(c.Image) || len(c.Args) == 0 {
				continue
			}
			refs := map[string]*corev1.SecretKeySelector{}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					refs[e.Name] = e.ValueFrom.SecretKeyRef
				}
			}
			want, ok := uses[strings.Join(c.Args[:min(2, len(c.Args))], " ")]
			if !ok {
				want = uses[c.Args[0]]
			}
			for _, name := range []string{"DATABASE_URL", "REDIS_URL"} {
				ref, has := refs[name]
				switch {
				case has && !slices.Contains(want, name):
					t.Errorf("%s %s (`switchboard %s`) gets %s, a store it never opens", o.GVK.Kind, o.Name, c.Args[0], name)
				case !has && slices.Contains(want, name):
					t.Errorf("%s %s (`switchboard %s`) does not get %s from switchboard-secrets", o.GVK.Kind, o.Name, c.Args[0], name)
				case has && name == "REDIS_URL" && (ref.Optional == nil || !*ref.Optional):
					t.Errorf("%s %s: REDIS_URL must be optional: true (redis.url serves without it)", o.GVK.Kind, o.Name)
				}
			}
		}
	}
}

// checkPseudonymKey: every Switchboard process that logs chats gets
// log.pseudonym_key (docs/operations.md, "Pseudonyms in logs and
// traces") from switchboard-secrets when the operator puts one there:
// a secret, the same in every process, so that one conversation has one
// pseudonym in every service's logs. Optional: without it the built-in
// key serves. The migrate Job names no chat.
func checkPseudonymKey(t *testing.T, objs []Object) {
	const name = "SWITCHBOARD_LOG__PSEUDONYM_KEY"
	for _, o := range objs {
		spec := PodSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range spec.Containers {
			if !IsSwitchboardImage(c.Image) || len(c.Args) == 0 || c.Args[0] == "migrate" || c.Args[0] == "fakellm" {
				continue
			}
			i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
			if i < 0 {
				t.Errorf("%s %s (`switchboard %s`) does not get %s from switchboard-secrets", o.GVK.Kind, o.Name, strings.Join(c.Args, " "), name)
				continue
			}
			ref := c.Env[i].ValueFrom
			if ref == nil || ref.SecretKeyRef == nil || !strings.HasPrefix(ref.SecretKeyRef.Name, "switchboard-secrets") || ref.SecretKeyRef.Key != name ||
				ref.SecretKeyRef.Optional == nil || !*ref.SecretKeyRef.Optional {
				t.Errorf("%s %s: %s must be the optional key %s of switchboard-secrets", o.GVK.Kind, o.Name, name, name)
			}
		}
	}
}

func TestKustomizeInvocations(t *testing.T) {
	t.Parallel()
	var inv []Invocation
	for _, o := range buildOverlays(t) {
		inv = append(inv, ObjectInvocations(o.name, o.objs)...)
	}
	if len(inv) < 14 {
		t.Fatalf("found %d switchboard containers in the overlays, want every service in each", len(inv))
	}
	for _, i := range inv {
		if len(i.Args) == 0 {
			t.Errorf("%s: no args", i.Where)
		}
	}
}

func TestDecodeIsStrict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc string
		wantErr   bool
	}{
		{"deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1}\n", false},
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n", true},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n", true},
		{"scaled object", "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {}\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode([]byte(tt.doc))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Decode: %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// checkPreStop: a pod a Service sends traffic to (a port other than ops)
// must keep serving for a while after Kubernetes starts stopping it:
// endpoints, kube-proxy and Ingress controllers drop it seconds after the
// SIGTERM, and until then requests still reach it. Without a preStop
// sleep the process closes its listener at once, and a platform's
// webhook call in that window fails (Twilio, LINE and others do not send
// it again). The fake LLM is a demo and tests' stand-in.
func checkPreStop(t *testing.T, svc, port string, d *appsv1.Deployment) {
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) > 0 && c.Args[0] == "fakellm" {
		return
	}
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil || l.PreStop.Sleep.Seconds < 3 {
		t.Errorf("Deployment %s: Service %s sends it traffic on %s, so it needs a preStop sleep of a few seconds (endpoints drop it after the SIGTERM)", d.Name, svc, port)
	}
}

// checkRouterProvider: the router reads the model provider the workers
// use (cmd/switchboard routerProvider, modelLister): /provider names it,
// a bare /model lists the provider's models with the workers' key, and
// /voice (and the voice mode a turn carries) is on only where the router
// finds an OpenAI-compatible provider. So a router container gets every
// provider key a worker container gets, and reaches the provider where
// the workers do.
func checkRouterProvider(t *testing.T, objs []Object) {
	containers := map[string]*corev1.Container{}
	labels := map[string]map[string]string{}
	for _, d := range typed[*appsv1.Deployment](objs) {
		c := &d.Spec.Template.Spec.Containers[0]
		if IsSwitchboardImage(c.Image) && len(c.Args) > 0 {
			containers[c.Args[0]] = c
			labels[c.Args[0]] = d.Spec.Template.Labels
		}
	}
	w, r := containers["worker"], containers["router"]
	if w == nil || r == nil {
		t.Fatal("no worker or no router Deployment")
	}
	refs := func(c *corev1.Container) map[string]corev1.SecretKeySelector {
		m := map[string]corev1.SecretKeySelector{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				m[e.Name] = *e.ValueFrom.SecretKeyRef
			}
		}
		return m
	}
	wr, rr := refs(w), refs(r)
	for _, v := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		want, ok := wr[v]
		if !ok {
			t.Errorf("worker: no %s from a Secret", v)
			continue
		}
		got, ok := rr[v]
		if !ok || got.Name != want.Name || got.Key != want.Key || (got.Optional == nil) != (want.Optional == nil) ||
			got.Optional != nil && *got.Optional != *want.Optional {
			t.Errorf("router: %s is %+v, want the workers' %+v (/provider, /model and /voice read it)", v, got, want)
		}
	}
	nps := typed[*networkingv1.NetworkPolicy](objs)
	for _, port := range egressPorts(nps, labels["worker"]) {
		if !egressAllows(nps, labels["router"], port) {
			t.Errorf("router: no NetworkPolicy lets it reach port %d, where the workers reach their provider", port)
		}
	}
}

// checkSkillsMounts: a container that mounts the skills ConfigMap
// (switchboard-skills) reads it only if its config.yaml lists the mount
// in skills.dirs; otherwise the operator's skills silently never load.
func checkSkillsMounts(t *testing.T, objs []Object) {
	n := 0
	for _, d := range typed[*appsv1.Deployment](objs) {
		spec := d.Spec.Template.Spec
		skillVolumes := map[string]bool{}
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, "switchboard-skills") {
				skillVolumes[v.Name] = true
			}
		}
		for _, c := range spec.Containers {
			for _, m := range c.VolumeMounts {
				if !skillVolumes[m.Name] {
					continue
				}
				n++
				var dirs []any
				if s, ok := configFile(t, spec, objs)["skills"].(map[string]any); ok {
					dirs, _ = s["dirs"].([]any)
				}
				if !slices.Contains(dirs, any(m.MountPath)) {
					t.Errorf("Deployment %s mounts the skills at %s, but its config.yaml's skills.dirs is %v", d.Name, m.MountPath, dirs)
				}
			}
		}
	}
	if n == 0 {
		t.Error("no Deployment mounts the skills ConfigMap")
	}
}

// checkDownloadEgress: a gateway whose code fetches an answer's
// attachments by URL (platform.NewDownloader: the pictures an answer
// names, a remote agent's or a proactive send's files) reaches public
// HTTPS, whatever else its platform needs; without it every such
// attachment times out in the cluster.
func checkDownloadEgress(t *testing.T, objs []Object) {
	dirs, err := filepath.Glob(filepath.Join(root(t), "services", "gateway", "*"))
	if err != nil {
		t.Fatal(err)
	}
	downloads := map[string]bool{}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "platform.NewDownloader(") {
				downloads["gateway-"+filepath.Base(dir)] = true
			}
		}
	}
	if len(downloads) == 0 {
		t.Fatal("no gateway downloads attachments: is the search broken?")
	}
	nps := typed[*networkingv1.NetworkPolicy](objs)
	for _, d := range typed[*appsv1.Deployment](objs) {
		component := d.Spec.Template.Labels["app.kubernetes.io/component"]
		if downloads[component] && !egressAllows(nps, d.Spec.Template.Labels, 443) {
			t.Errorf("Deployment %s downloads attachments by URL, but no NetworkPolicy lets it reach port 443", d.Name)
		}
	}
}
