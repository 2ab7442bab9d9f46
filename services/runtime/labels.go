package runtime

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	"github.com/nodelet/nodelet/internal/podutil"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's CRI labels and annotations, so that crictl and other tools
// read nodelet's pods as they read the kubelet's.
const (
	labelPodName       = cri.LabelPodName
	labelPodNamespace  = cri.LabelPodNamespace
	labelPodUID        = cri.LabelPodUID
	labelContainerName = cri.LabelContainerName

	annotationPodDeletionGracePeriod    = "io.kubernetes.pod.deletionGracePeriod"
	annotationPodTerminationGracePeriod = "io.kubernetes.pod.terminationGracePeriod"
	annotationContainerHash             = "io.kubernetes.container.hash"
	annotationRestartCount              = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath    = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy  = "io.kubernetes.container.terminationMessagePolicy"
	annotationPreStopHandler            = "io.kubernetes.container.preStopHandler"
	annotationContainerPorts            = "io.kubernetes.container.ports"
)

// nodelet's own marks. Only sandboxes and containers carrying
// cri.LabelManaged are ever treated as orphans and killed: a pod started by
// another tool on the same containerd is left alone.
const (
	// LabelManaged marks every sandbox and container nodelet creates.
	LabelManaged = cri.LabelManaged
	// annotationContainerType says whether a container is an init
	// container, a sidecar or an app container (schemas.ContainerKind*), so
	// a kill without the spec (the pod left the sources) can still stop
	// sidecars last.
	annotationContainerType = "io.nodelet.container.type"
)

// managedFilter selects nodelet's sandboxes and containers in CRI list calls.
var managedFilter = cri.ManagedSelector()

func podLabels(pod *corev1.Pod) map[string]string {
	l := make(map[string]string, len(pod.Labels)+4)
	for k, v := range pod.Labels {
		l[k] = v
	}
	l[labelPodName] = pod.Name
	l[labelPodNamespace] = pod.Namespace
	l[labelPodUID] = string(pod.UID)
	l[LabelManaged] = "true"
	return l
}

func podAnnotations(pod *corev1.Pod) map[string]string {
	a := make(map[string]string, len(pod.Annotations))
	for k, v := range pod.Annotations {
		a[k] = v
	}
	return a
}

func containerLabels(pod *corev1.Pod, c *corev1.Container) map[string]string {
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		labelPodUID:        string(pod.UID),
		labelContainerName: c.Name,
		LabelManaged:       "true",
	}
}

func containerAnnotations(pod *corev1.Pod, c *corev1.Container, kind string, restartCount int) map[string]string {
	a := map[string]string{
		annotationContainerHash:            hashContainer(c),
		annotationRestartCount:             strconv.Itoa(restartCount),
		annotationTerminationMessagePath:   c.TerminationMessagePath,
		annotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
		annotationContainerType:            kind,
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a[annotationPodDeletionGracePeriod] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[annotationPodTerminationGracePeriod] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if b, err := json.Marshal(c.Lifecycle.PreStop); err == nil {
			a[annotationPreStopHandler] = string(b)
		}
	}
	if len(c.Ports) > 0 {
		if b, err := json.Marshal(c.Ports); err == nil {
			a[annotationContainerPorts] = string(b)
		}
	}
	return a
}

// hashContainer is io.kubernetes.container.hash. Like the kubelet's it
// covers only the fields the API lets change on a running pod (name and
// image): everything else is immutable, and a resize must not restart.
func hashContainer(c *corev1.Container) string {
	b, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	h := fnv.New32a()
	_, _ = h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32()), 16)
}

// containerKind says what role c plays in pod.
func containerKind(pod *corev1.Pod, name string) string {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			if podutil.IsRestartableInit(&pod.Spec.InitContainers[i]) {
				return schemas.ContainerKindSidecar
			}
			return schemas.ContainerKindInit
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return schemas.ContainerKindEphemeral
		}
	}
	return schemas.ContainerKindApp
}

func parseInt64(s string) *int64 {
	if s == "" {
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil
	}
	return &v
}
