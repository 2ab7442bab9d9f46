package sources

import (
	"crypto/sha256"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodelet/nodelet/schemas"
)

// Event reasons. FailedValidation is the kubelet's (pkg/kubelet/events) for
// a pod it will not run because of what the pod says; we use it for every
// manifest we cannot use (does not parse, invalid, references API objects)
// and for duplicate pod names, as the kubelet's PodConfig does.
// FailedToFetchManifest is nodelet's own: the kubelet only logs an
// unreachable manifest URL.
const (
	ReasonFailedValidation      = "FailedValidation"
	ReasonFailedToFetchManifest = "FailedToFetchManifest"
)

// origin is one place static pods come from: a manifest file or the
// manifest URL. It remembers the last content read, so unchanged content is
// not parsed (nor reported) again, and the last good pods it held, so a
// half-written or broken manifest does not take its pods away.
type origin struct {
	name   string // the file's path or the URL; part of the pods' UIDs
	isFile bool
	sum    [sha256.Size]byte
	read   bool
	pods   []*corev1.Pod // last good pods, identity applied, in manifest order
}

// staticParser turns manifests into static pods, and reports what it
// rejects on the bus and in the log.
type staticParser struct {
	nodeName string
	log      *slog.Logger
	emit     func(schemas.Event)
}

// load takes new content for o and reports whether o's pods may have
// changed. A manifest that does not parse keeps every last good pod of o; a
// pod that is invalid keeps its last good version (same namespace and
// name), if o had one. Rejections are logged and emitted once per content.
func (sp *staticParser) load(o *origin, data []byte) bool {
	sum := sha256.Sum256(data)
	if o.read && sum == o.sum {
		return false
	}
	o.sum, o.read = sum, true
	what := "url"
	if o.isFile {
		what = "path"
	}
	m, err := decodeManifest(data)
	if err != nil {
		sp.log.Warn("Rejected static pod manifest", what, o.name, "keptPods", len(o.pods), "err", err)
		sp.emit(schemas.Event{
			Object:  corev1.ObjectReference{Kind: "Node", Name: sp.nodeName},
			Type:    corev1.EventTypeWarning,
			Reason:  ReasonFailedValidation,
			Message: fmt.Sprintf("Error reading static pod manifest %s, ignoring it: %v", o.name, err),
		})
		return false
	}
	if len(m.Warnings) > 0 {
		sp.log.Warn("Static pod manifest has fields that were ignored", what, o.name, "fields", m.Warnings)
	}
	last := map[string]*corev1.Pod{}
	for _, p := range o.pods {
		last[p.Namespace+"/"+p.Name] = p
	}
	var pods []*corev1.Pod
	for i, pod := range m.Pods {
		errs := sp.prepare(pod, o)
		if len(errs) == 0 {
			pods = append(pods, pod)
			continue
		}
		full := pod.Namespace + "/" + pod.Name
		kept := last[full]
		sp.log.Warn("Rejected static pod", what, o.name, "index", i, "pod", full, "podUID", pod.UID,
			"keptLastGood", kept != nil, "err", errs.ToAggregate())
		sp.emit(schemas.Event{
			Object:  corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Type:    corev1.EventTypeWarning,
			Reason:  ReasonFailedValidation,
			Message: fmt.Sprintf("Error validating pod %s from %s, ignoring: %v", full, o.name, errs.ToAggregate()),
		})
		if kept != nil {
			pods = append(pods, kept)
		}
	}
	o.pods = pods
	return true
}

// prepare applies the API defaults and the kubelet's identity to a decoded
// pod, in the kubelet's order, and validates the result.
func (sp *staticParser) prepare(pod *corev1.Pod, o *origin) field.ErrorList {
	if pod.Name == "" {
		// Without a name the pod has no identity to report it under.
		pod.Namespace = ""
		return field.ErrorList{field.Required(field.NewPath("metadata", "name"), "a static pod needs a name")}
	}
	setPodDefaults(pod)
	staticPod(pod, o.name, o.isFile, sp.nodeName)
	errs := validatePod(pod)
	return append(errs, apiReferences(pod)...)
}
