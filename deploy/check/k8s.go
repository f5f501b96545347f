package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/openapi/openapitest"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomization.yaml the check reads; strict decoding refuses
// any other field, so that one the check does not know is not silently ignored.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
}

// manifest is one object of a manifest file, decoded.
type manifest struct {
	where string // file and position, for the problems
	obj   runtime.Object
	gvk   schema.GroupVersionKind
	raw   []byte // the document as JSON
}

// strictDecoder decodes the API's objects into their Go types, refusing unknown and
// repeated fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// CheckKubernetes checks the manifests dir/kustomization.yaml lists: that every YAML file of
// dir is listed, that each object is valid, and that they fit together.
func CheckKubernetes(dir string, settings Settings) []error {
	kpath := filepath.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(kpath)
	if err != nil {
		return []error{err}
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return []error{fmt.Errorf("%s: %w", kpath, err)}
	}
	var problems []error
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		problems = append(problems, fmt.Errorf("%s: not a kustomize.config.k8s.io/v1beta1 Kustomization", kpath))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(k.Resources, base) {
			problems = append(problems, fmt.Errorf("%s: %s is not listed in resources", kpath, base))
		}
	}
	var objs []manifest
	for _, r := range k.Resources {
		m, errs := readManifests(filepath.Join(dir, r))
		objs = append(objs, m...)
		problems = append(problems, errs...)
	}
	for _, m := range objs {
		problems = append(problems, validateSchema(m)...)
		if ns := m.obj.(metav1.Object).GetNamespace(); k.Namespace != "" && ns != "" && ns != k.Namespace {
			problems = append(problems, fmt.Errorf("%s: namespace %s, not the kustomization's %s", m.where, ns, k.Namespace))
		}
	}
	return append(problems, checkTogether(objs, settings)...)
}

// readManifests decodes every document of the file at path strictly.
func readManifests(path string) ([]manifest, []error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, []error{err}
	}
	defer func() { _ = f.Close() }()
	var out []manifest
	var problems []error
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, append(problems, fmt.Errorf("%s: %w", path, err))
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			n--
			continue
		}
		where := fmt.Sprintf("%s: document %d", path, n)
		raw, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", where, err))
			continue
		}
		obj, gvk, err := strictDecoder.Decode(raw, nil, nil)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if name := obj.(metav1.Object).GetName(); name != "" {
			where = fmt.Sprintf("%s: %s %s", path, gvk.Kind, name)
		}
		out = append(out, manifest{where: where, obj: obj, gvk: *gvk, raw: raw})
	}
	return out, problems
}

// stripComments drops the comment lines of a YAML document, to tell an empty one.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range strings.SplitSeq(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// openAPI holds the OpenAPI v3 documents of the API group versions client-go ships (the
// ones its openapitest package embeds), and the schemas compiled from them.
var openAPI struct {
	once     sync.Once
	err      error
	compiler *jsonschema.Compiler
	// components maps a kind to its document's URL and its component's name.
	components map[schema.GroupVersionKind]string
	compiled   map[schema.GroupVersionKind]*jsonschema.Schema
	mu         sync.Mutex
}

// loadOpenAPI reads the embedded OpenAPI documents into a compiler.
func loadOpenAPI() error {
	openAPI.once.Do(func() {
		openAPI.compiler = jsonschema.NewCompiler()
		openAPI.components = map[schema.GroupVersionKind]string{}
		openAPI.compiled = map[schema.GroupVersionKind]*jsonschema.Schema{}
		paths, err := openapitest.NewEmbeddedFileClient().Paths()
		if err != nil {
			openAPI.err = err
			return
		}
		for path, gv := range paths {
			raw, err := gv.Schema("application/json")
			if err != nil {
				openAPI.err = fmt.Errorf("OpenAPI document %s: %w", path, err)
				return
			}
			url := "file:///openapi/" + strings.ReplaceAll(path, "/", "_") + ".json"
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				openAPI.err = fmt.Errorf("OpenAPI document %s: %w", path, err)
				return
			}
			if err := openAPI.compiler.AddResource(url, doc); err != nil {
				openAPI.err = err
				return
			}
			var spec struct {
				Components struct {
					Schemas map[string]struct {
						GVK []schema.GroupVersionKind `json:"x-kubernetes-group-version-kind"`
					} `json:"schemas"`
				} `json:"components"`
			}
			if err := json.Unmarshal(raw, &spec); err != nil {
				openAPI.err = err
				return
			}
			for name, s := range spec.Components.Schemas {
				for _, gvk := range s.GVK {
					// A kind of this document's group version, not one it only refers to.
					if ("api/"+gvk.Version == path && gvk.Group == "") || path == "apis/"+gvk.Group+"/"+gvk.Version {
						openAPI.components[gvk] = url + "#/components/schemas/" + jsonPointerEscape(name)
					}
				}
			}
		}
	})
	return openAPI.err
}

// jsonPointerEscape escapes a JSON pointer's token.
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// validateSchema validates an object against its kind's OpenAPI schema, when one is known.
func validateSchema(m manifest) []error {
	if err := loadOpenAPI(); err != nil {
		return []error{fmt.Errorf("the OpenAPI schemas: %w", err)}
	}
	loc, ok := openAPI.components[m.gvk]
	if !ok {
		return nil // decoded strictly into its Go type; client-go ships no schema of its group
	}
	openAPI.mu.Lock()
	sch, ok := openAPI.compiled[m.gvk]
	if !ok {
		var err error
		if sch, err = openAPI.compiler.Compile(loc); err != nil {
			openAPI.mu.Unlock()
			return []error{fmt.Errorf("%s: the schema of %s: %w", m.where, m.gvk, err)}
		}
		openAPI.compiled[m.gvk] = sch
	}
	openAPI.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.raw))
	if err != nil {
		return []error{fmt.Errorf("%s: %w", m.where, err)}
	}
	if err := sch.Validate(v); err != nil {
		return []error{fmt.Errorf("%s: %v", m.where, err)}
	}
	return nil
}

// workload is a pod template with where it comes from.
type workload struct {
	where    string
	selector *metav1.LabelSelector // nil for a Job
	spec     *corev1.PodTemplateSpec
}

// checkTogether checks what no schema sees: selectors that select, probes on declared
// ports, ConfigMaps and Secrets that exist, and the SW4RM_* variables of every container.
func checkTogether(objs []manifest, settings Settings) []error {
	var problems []error
	configMaps := map[string]map[string]bool{}
	secrets := map[string]map[string]bool{}
	var workloads []workload
	for _, m := range objs {
		switch o := m.obj.(type) {
		case *corev1.ConfigMap:
			keys := map[string]bool{}
			for k := range o.Data {
				keys[k] = true
			}
			configMaps[o.Name] = keys
			problems = append(problems, checkVariables(m.where, keys, false, settings)...)
		case *corev1.Secret:
			keys := map[string]bool{}
			for k := range o.Data {
				keys[k] = true
			}
			for k := range o.StringData {
				keys[k] = true
			}
			secrets[o.Name] = keys
			problems = append(problems, checkVariables(m.where, keys, false, settings)...)
		case *appsv1.Deployment:
			workloads = append(workloads, workload{m.where, o.Spec.Selector, &o.Spec.Template})
		case *batchv1.Job:
			workloads = append(workloads, workload{m.where, nil, &o.Spec.Template})
		}
	}
	for _, w := range workloads {
		if w.selector != nil {
			sel, err := metav1.LabelSelectorAsSelector(w.selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.spec.Labels)) {
				problems = append(problems, fmt.Errorf("%s: spec.selector does not select the pod template's labels", w.where))
			}
		}
		for _, c := range w.spec.Spec.Containers {
			problems = append(problems, checkContainer(w.where, c, configMaps, secrets, settings)...)
		}
	}
	for _, m := range objs {
		var sel labels.Selector
		switch o := m.obj.(type) {
		case *corev1.Service:
			if len(o.Spec.Selector) > 0 {
				sel = labels.SelectorFromSet(o.Spec.Selector)
			}
		case *policyv1.PodDisruptionBudget:
			s, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s: %w", m.where, err))
				continue
			}
			sel = s
		default:
			continue
		}
		if sel == nil || sel.Empty() || !slices.ContainsFunc(workloads, func(w workload) bool {
			return w.selector != nil && sel.Matches(labels.Set(w.spec.Labels))
		}) {
			problems = append(problems, fmt.Errorf("%s: its selector selects the pods of no Deployment", m.where))
		}
	}
	return problems
}

// checkContainer checks a container's probes and references, and, for a sw4rm server or
// worker, its variables.
func checkContainer(where string, c corev1.Container, configMaps, secrets map[string]map[string]bool, settings Settings) []error {
	where = fmt.Sprintf("%s: container %s", where, c.Name)
	var problems []error
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
		ports[fmt.Sprint(p.ContainerPort)] = true
	}
	for name, p := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe, "startupProbe": c.StartupProbe} {
		if p != nil && p.HTTPGet != nil && !ports[p.HTTPGet.Port.String()] {
			problems = append(problems, fmt.Errorf("%s: %s's port %s is not one of the container's ports", where, name, p.HTTPGet.Port.String()))
		}
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil && !configMaps[r.ConfigMapKeyRef.Name][r.ConfigMapKeyRef.Key] {
			problems = append(problems, fmt.Errorf("%s: %s: no key %s in a ConfigMap %s", where, e.Name, r.ConfigMapKeyRef.Key, r.ConfigMapKeyRef.Name))
		}
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !secrets[r.SecretKeyRef.Name][r.SecretKeyRef.Key] {
			problems = append(problems, fmt.Errorf("%s: %s: no key %s in a Secret %s", where, e.Name, r.SecretKeyRef.Key, r.SecretKeyRef.Name))
		}
	}
	for _, from := range c.EnvFrom {
		var keys map[string]bool
		var ok bool
		switch {
		case from.ConfigMapRef != nil:
			keys, ok = configMaps[from.ConfigMapRef.Name]
			if !ok {
				problems = append(problems, fmt.Errorf("%s: envFrom names no ConfigMap here: %s", where, from.ConfigMapRef.Name))
			}
		case from.SecretRef != nil:
			keys, ok = secrets[from.SecretRef.Name]
			if !ok {
				problems = append(problems, fmt.Errorf("%s: envFrom names no Secret here: %s", where, from.SecretRef.Name))
			}
		}
		for k := range keys {
			env[from.Prefix+k] = true
		}
	}
	sw4rm := strings.Contains(c.Image, "sw4rm") && len(c.Args) > 0 && (c.Args[0] == "server" || c.Args[0] == "worker")
	if sw4rm && (c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz") {
		problems = append(problems, fmt.Errorf("%s: a sw4rm process's readinessProbe is GET /healthz on its HTTP port", where))
	}
	// A container's own variables are checked here; those of ConfigMaps and Secrets with them.
	own := map[string]bool{}
	for _, e := range c.Env {
		own[e.Name] = true
	}
	problems = append(problems, checkVariables(where, own, false, settings)...)
	if sw4rm {
		for name, why := range Required {
			if !env[name] {
				problems = append(problems, fmt.Errorf("%s: %s is not set: %s", where, name, why))
			}
		}
	}
	return sorted(problems)
}
