// Package deploy loads Switchboard's deployment files the way their own
// tools do — docker-compose.yaml with the compose-spec library, the
// Kubernetes overlays with `kubectl kustomize` and the Kubernetes API types —
// so tests can check them without Docker or a cluster. Nothing in the
// switchboard binary imports it.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Paths relative to the repository root.
const (
	ComposeFile = "docker-compose.yaml"
	EnvExample  = ".env.example"
	OverlaysDir = "deploy/k8s/overlays"
	Dockerfile  = "deploy/Dockerfile"
)

// ErrNoKubectl means kubectl is not installed, so overlays cannot be built.
var ErrNoKubectl = errors.New("kubectl not found in PATH")

// Root finds the repository root: the nearest directory above the working
// directory holding go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Compose is a loaded compose project and the variables its
// interpolation asked for.
type Compose struct {
	Project *types.Project
	// Variables are the names every ${VAR} in the file refers to.
	Variables []string
}

// LoadCompose loads and validates docker-compose.yaml with the given
// profiles ("*" enables all) and env as the only environment: neither the
// caller's environment nor a local .env leaks in.
func LoadCompose(ctx context.Context, root string, profiles []string, env map[string]string) (*Compose, error) {
	var (
		mu   sync.Mutex
		vars = map[string]bool{}
	)
	if env == nil {
		env = map[string]string{}
	}
	details := types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, ComposeFile)}},
		Environment: env,
	}
	p, err := loader.LoadWithContext(ctx, details, func(o *loader.Options) {
		o.SetProjectName("switchboard", true)
		o.Profiles = profiles
		lookup := o.Interpolate.LookupValue
		o.Interpolate.LookupValue = func(key string) (string, bool) {
			mu.Lock()
			vars[key] = true
			mu.Unlock()
			return lookup(key)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", ComposeFile, err)
	}
	names := make([]string, 0, len(vars))
	for v := range vars {
		names = append(names, v)
	}
	sort.Strings(names)
	return &Compose{Project: p, Variables: names}, nil
}

// IsSwitchboard reports whether a compose service runs the Switchboard image.
func IsSwitchboard(s types.ServiceConfig) bool {
	return s.Build != nil && s.Build.Dockerfile == Dockerfile
}

// IsSwitchboardImage reports whether a container image reference is the
// Switchboard image (any registry, any tag).
func IsSwitchboardImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	name, _, _ = strings.Cut(name, ":")
	return name == "switchboard"
}

// Overlays lists the kustomize overlay directories (absolute).
func Overlays(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, OverlaysDir))
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(root, OverlaysDir, e.Name()))
		}
	}
	return dirs, nil
}

// Kustomize builds a kustomization directory with `kubectl kustomize`.
func Kustomize(ctx context.Context, dir string) ([]byte, error) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return nil, ErrNoKubectl
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", dir, err, stderr.String())
	}
	return out, nil
}

// Object is one decoded Kubernetes object: Typed for kinds the client-go
// scheme knows (decoded strictly: unknown or duplicate fields fail), else
// Unstructured.
type Object struct {
	GVK          schema.GroupVersionKind
	Name         string
	Typed        runtime.Object
	Unstructured *unstructured.Unstructured
}

// Custom resources the manifests may use, decoded as unstructured.
var customKinds = map[schema.GroupVersionKind]bool{
	{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}:           true,
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}: true,
}

var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Decode splits a multi-document YAML stream and decodes every object.
func Decode(stream []byte) ([]Object, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var objs []Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split yaml: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, err := decodeOne(doc)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

func decodeOne(doc []byte) (Object, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return Object{}, fmt.Errorf("yaml to json: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return Object{}, fmt.Errorf("decode object: %w", err)
	}
	gvk := u.GroupVersionKind()
	obj := Object{GVK: gvk, Name: u.GetName(), Unstructured: u}
	if customKinds[gvk] {
		return obj, nil
	}
	if !scheme.Scheme.Recognizes(gvk) {
		return Object{}, fmt.Errorf("%s %q: kind not in the client-go scheme nor a known custom resource", gvk, obj.Name)
	}
	typed, _, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		return Object{}, fmt.Errorf("%s %q: %w", gvk.Kind, obj.Name, err)
	}
	obj.Typed = typed
	return obj, nil
}

// Invocation is one way the deployment files run the binary.
type Invocation struct {
	// Where names the file and service or workload.
	Where string
	// Args are the arguments after `switchboard`.
	Args []string
	// Healthcheck is the arguments after the binary in a compose service's
	// health check, if it runs the binary.
	Healthcheck []string
}

// ComposeInvocations lists every switchboard command docker-compose.yaml
// runs, with all profiles enabled.
func ComposeInvocations(ctx context.Context, root string) ([]Invocation, error) {
	c, err := LoadCompose(ctx, root, []string{"*"}, nil)
	if err != nil {
		return nil, err
	}
	var inv []Invocation
	for _, name := range c.Project.ServiceNames() {
		s := c.Project.Services[name]
		if !IsSwitchboard(s) {
			continue
		}
		i := Invocation{Where: ComposeFile + " service " + name, Args: s.Command}
		if s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 2 && s.HealthCheck.Test[0] == "CMD" {
			i.Healthcheck = s.HealthCheck.Test[2:]
		}
		inv = append(inv, i)
	}
	return inv, nil
}

// KustomizeInvocations lists the args of every Switchboard container (and
// init container) in every overlay. It returns ErrNoKubectl without kubectl.
func KustomizeInvocations(ctx context.Context, root string) ([]Invocation, error) {
	dirs, err := Overlays(root)
	if err != nil {
		return nil, err
	}
	var inv []Invocation
	for _, dir := range dirs {
		out, err := Kustomize(ctx, dir)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(out)
		if err != nil {
			return nil, fmt.Errorf("overlay %s: %w", filepath.Base(dir), err)
		}
		inv = append(inv, ObjectInvocations(filepath.Base(dir), objs)...)
	}
	return inv, nil
}

// ObjectInvocations lists the args of every Switchboard container (and
// init container) among objs, the objects of the named overlay.
func ObjectInvocations(overlay string, objs []Object) []Invocation {
	var inv []Invocation
	for _, o := range objs {
		spec := PodSpec(o)
		if spec == nil {
			continue
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if !IsSwitchboardImage(c.Image) {
				continue
			}
			where := fmt.Sprintf("overlay %s %s/%s container %s", overlay, o.GVK.Kind, o.Name, c.Name)
			inv = append(inv, Invocation{Where: where, Args: append(append([]string{}, c.Command...), c.Args...)})
		}
	}
	return inv
}

// PodSpec returns the pod template spec of a workload object, or nil.
func PodSpec(o Object) *corev1.PodSpec {
	switch t := o.Typed.(type) {
	case *appsv1.Deployment:
		return &t.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &t.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &t.Spec.Template.Spec
	case *batchv1.Job:
		return &t.Spec.Template.Spec
	case *batchv1.CronJob:
		return &t.Spec.JobTemplate.Spec.Template.Spec
	case *corev1.Pod:
		return &t.Spec
	}
	return nil
}
