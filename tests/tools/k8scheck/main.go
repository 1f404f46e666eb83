// k8scheck decodes every object of a multi-document YAML stream strictly into its typed
// Kubernetes Go API type, the way the API server's strict field validation does.
//
// Usage: k8scheck [-list] [FILE...]   (no FILE or "-": standard input)
//
// Each document is decoded by apiVersion/kind with apimachinery's strict YAML serializer: an
// unknown field, a duplicate field or a value of the wrong type is an error, and so is a kind
// that is not registered below. Built-in kinds decode into k8s.io/api types; the CRD kinds the
// chart can render (cert-manager.io/v1 Issuer and Certificate, monitoring.coreos.com/v1
// ServiceMonitor and PodMonitor) decode the same strict way into the Go types those projects
// generate their CRD schemas from (cert-manager v1.19.4, prometheus-operator v0.89.0), so
// every field is checked by name and type; their CRDs' OpenAPI-only rules (patterns, enums,
// CEL) are not. On top of decoding it checks metadata the API server would
// refuse: a missing or invalid name, an invalid namespace, invalid label keys/values and
// annotation keys. The exit status is 1 on the first stream with errors (every error of every
// document is printed, naming the source template, the object and the field), 2 on usage
// errors, 0 when every object passes. -list prints "apiVersion kind namespace/name" per object.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

var addToScheme = []func(*runtime.Scheme) error{
	corev1.AddToScheme,
	appsv1.AddToScheme,
	batchv1.AddToScheme,
	rbacv1.AddToScheme,
	admissionregistrationv1.AddToScheme,
	autoscalingv2.AddToScheme,
	networkingv1.AddToScheme,
	policyv1.AddToScheme,
	schedulingv1.AddToScheme,
	certmanagerv1.AddToScheme,
	monitoringv1.AddToScheme,
}

// Kinds whose metadata.name must be a DNS-1035 label (Service names become DNS labels).
var dns1035Kinds = map[string]bool{"Service": true}

// Cluster-scoped kinds: a namespace on them is an error.
var clusterScoped = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "MutatingWebhookConfiguration": true,
	"ValidatingWebhookConfiguration": true, "ClusterIssuer": true, "PriorityClass": true,
	"Namespace": true, "CustomResourceDefinition": true,
}

type document struct {
	source string // the "# Source:" comment helm writes, when present
	index  int    // 1-based position in the stream
	data   []byte
}

func main() {
	list := flag.Bool("list", false, "print apiVersion, kind and namespace/name of every object")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: k8scheck [-list] [FILE...]   (no FILE or -: standard input)")
	}
	flag.Parse()

	scheme := runtime.NewScheme()
	for _, add := range addToScheme {
		if err := add(scheme); err != nil {
			fmt.Fprintf(os.Stderr, "k8scheck: scheme: %v\n", err)
			os.Exit(2)
		}
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})

	files := flag.Args()
	if len(files) == 0 {
		files = []string{"-"}
	}
	failed, objects := 0, 0
	for _, name := range files {
		var r io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintf(os.Stderr, "k8scheck: %v\n", err)
				os.Exit(2)
			}
			defer f.Close()
			r = f
		}
		docs, err := split(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "k8scheck: %s: %v\n", name, err)
			os.Exit(1)
		}
		for _, d := range docs {
			objects++
			line, errs := check(strict, d)
			if *list && line != "" {
				fmt.Println(line)
			}
			for _, e := range errs {
				failed++
				fmt.Fprintf(os.Stderr, "k8scheck: %s: document %d%s: %s\n", name, d.index,
					sourceSuffix(d.source), e)
			}
		}
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "k8scheck: %d error(s) in %d object(s)\n", failed, objects)
		os.Exit(1)
	}
	if objects == 0 {
		fmt.Fprintln(os.Stderr, "k8scheck: no objects in the input")
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "k8scheck: %d object(s) decoded strictly, no errors\n", objects)
}

func sourceSuffix(src string) string {
	if src == "" {
		return ""
	}
	return " (" + src + ")"
}

// split cuts a YAML stream into its non-empty documents, remembering helm's "# Source:" line.
func split(r io.Reader) ([]document, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []document
	for i := 1; ; i++ {
		raw, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %v", i, err)
		}
		src, empty := "", true
		for _, l := range strings.Split(string(raw), "\n") {
			t := strings.TrimSpace(l)
			if strings.HasPrefix(t, "# Source:") {
				src = strings.TrimSpace(strings.TrimPrefix(t, "# Source:"))
			}
			if t != "" && t != "---" && !strings.HasPrefix(t, "#") {
				empty = false
			}
		}
		if empty {
			continue
		}
		out = append(out, document{source: src, index: i, data: raw})
	}
}

// check decodes one document strictly and validates its metadata. It returns the -list line
// and the errors found, each naming the object.
func check(strict runtime.Decoder, d document) (string, []string) {
	var tm metav1.TypeMeta
	if err := utilyaml.Unmarshal(d.data, &tm); err != nil {
		return "", []string{fmt.Sprintf("not a YAML object: %v", err)}
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return "", []string{"apiVersion and kind are required"}
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	obj, _, err := strict.Decode(d.data, &gvk, nil)
	id := tm.APIVersion + " " + tm.Kind
	var errs []string
	if err != nil {
		if obj == nil || !runtime.IsStrictDecodingError(err) {
			return "", []string{fmt.Sprintf("%s: %v", id, err)}
		}
		// Strict errors list every unknown/duplicate field; the object decoded anyway.
		for _, e := range err.(interface{ Errors() []error }).Errors() {
			errs = append(errs, e.Error())
		}
	}
	acc, aerr := meta.Accessor(obj)
	if aerr != nil {
		return "", []string{fmt.Sprintf("%s: no object metadata: %v", id, aerr)}
	}
	ref := acc.GetName()
	if acc.GetNamespace() != "" {
		ref = acc.GetNamespace() + "/" + ref
	}
	id += " " + ref
	for _, e := range metadataErrors(tm.Kind, acc) {
		errs = append(errs, e.Error())
	}
	for _, e := range objectErrors(obj) {
		errs = append(errs, e.Error())
	}
	for i := range errs {
		errs[i] = id + ": " + errs[i]
	}
	return id, errs
}

func metadataErrors(kind string, m metav1.Object) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("metadata")
	name := m.GetName()
	switch {
	case name == "":
		errs = append(errs, field.Required(p.Child("name"), ""))
	case dns1035Kinds[kind]:
		for _, msg := range utilvalidation.IsDNS1035Label(name) {
			errs = append(errs, field.Invalid(p.Child("name"), name, msg))
		}
	case kind == "ClusterRole" || kind == "ClusterRoleBinding" || kind == "Role" ||
		kind == "RoleBinding":
		for _, msg := range path.IsValidPathSegmentName(name) {
			errs = append(errs, field.Invalid(p.Child("name"), name, msg))
		}
	default:
		for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
			errs = append(errs, field.Invalid(p.Child("name"), name, msg))
		}
	}
	if ns := m.GetNamespace(); ns != "" {
		if clusterScoped[kind] {
			errs = append(errs, field.Forbidden(p.Child("namespace"), kind+" is cluster-scoped"))
		}
		for _, msg := range utilvalidation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(p.Child("namespace"), ns, msg))
		}
	}
	errs = append(errs, labelErrors(m.GetLabels(), p.Child("labels"))...)
	errs = append(errs, validation.ValidateAnnotations(m.GetAnnotations(), p.Child("annotations"))...)
	return errs
}

func labelErrors(labels map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range labels {
		for _, msg := range utilvalidation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
		for _, msg := range utilvalidation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(p.Key(k), v, msg))
		}
	}
	return errs
}

// objectErrors checks what the API server's validation would refuse in the workloads and
// Services a chart renders: a selector that does not match the pod template, invalid
// container/port/env names, mounts of undeclared volumes.
func objectErrors(obj runtime.Object) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		errs = append(errs, selectorErrors(o.Spec.Selector, o.Spec.Template.Labels, spec)...)
		errs = append(errs, podErrors(&o.Spec.Template, spec.Child("template"))...)
	case *appsv1.Deployment:
		errs = append(errs, selectorErrors(o.Spec.Selector, o.Spec.Template.Labels, spec)...)
		errs = append(errs, podErrors(&o.Spec.Template, spec.Child("template"))...)
	case *corev1.Pod:
		errs = append(errs, podErrors(&corev1.PodTemplateSpec{ObjectMeta: o.ObjectMeta, Spec: o.Spec},
			field.NewPath(""))...)
	case *corev1.Service:
		for i, sp := range o.Spec.Ports {
			pp := spec.Child("ports").Index(i)
			if sp.Name != "" {
				for _, msg := range utilvalidation.IsValidPortName(sp.Name) {
					errs = append(errs, field.Invalid(pp.Child("name"), sp.Name, msg))
				}
			}
			if sp.Port < 1 || sp.Port > 65535 {
				errs = append(errs, field.Invalid(pp.Child("port"), sp.Port, "must be 1..65535"))
			}
		}
		errs = append(errs, labelErrors(o.Spec.Selector, spec.Child("selector"))...)
	}
	return errs
}

func selectorErrors(sel *metav1.LabelSelector, labels map[string]string, p *field.Path) field.ErrorList {
	if sel == nil {
		return field.ErrorList{field.Required(p.Child("selector"), "")}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return field.ErrorList{field.Invalid(p.Child("selector"), sel, err.Error())}
	}
	if s.Empty() || !s.Matches(labelSet(labels)) {
		return field.ErrorList{field.Invalid(p.Child("template", "metadata", "labels"), labels,
			"selector does not match template labels")}
	}
	return nil
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

func podErrors(t *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	errs := labelErrors(t.Labels, p.Child("metadata", "labels"))
	errs = append(errs, validation.ValidateAnnotations(t.Annotations, p.Child("metadata", "annotations"))...)
	sp := p.Child("spec")
	vols := map[string]bool{}
	for i, v := range t.Spec.Volumes {
		if vols[v.Name] {
			errs = append(errs, field.Duplicate(sp.Child("volumes").Index(i).Child("name"), v.Name))
		}
		vols[v.Name] = true
		for _, msg := range utilvalidation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(sp.Child("volumes").Index(i).Child("name"), v.Name, msg))
		}
	}
	check := func(cs []corev1.Container, cp *field.Path) {
		for i, c := range cs {
			ci := cp.Index(i)
			for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
				errs = append(errs, field.Invalid(ci.Child("name"), c.Name, msg))
			}
			if c.Image == "" {
				errs = append(errs, field.Required(ci.Child("image"), ""))
			}
			for j, port := range c.Ports {
				if port.Name == "" {
					continue
				}
				for _, msg := range utilvalidation.IsValidPortName(port.Name) {
					errs = append(errs, field.Invalid(ci.Child("ports").Index(j).Child("name"), port.Name, msg))
				}
			}
			for j, e := range c.Env {
				for _, msg := range utilvalidation.IsEnvVarName(e.Name) {
					errs = append(errs, field.Invalid(ci.Child("env").Index(j).Child("name"), e.Name, msg))
				}
			}
			for j, m := range c.VolumeMounts {
				if !vols[m.Name] {
					errs = append(errs, field.NotFound(ci.Child("volumeMounts").Index(j).Child("name"), m.Name))
				}
			}
		}
	}
	check(t.Spec.InitContainers, sp.Child("initContainers"))
	check(t.Spec.Containers, sp.Child("containers"))
	if len(t.Spec.Containers) == 0 {
		errs = append(errs, field.Required(sp.Child("containers"), ""))
	}
	return errs
}
