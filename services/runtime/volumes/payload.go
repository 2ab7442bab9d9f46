package volumes

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultMode is the API's default file mode of configMap, secret,
// downwardAPI and projected volumes (0644).
const DefaultMode int32 = 0o644

func modeOr(m *int32) int32 {
	if m == nil {
		return DefaultMode
	}
	return *m
}

// ConfigMapPayload is the kubelet's configmap.MakePayload: every key (or
// the listed items) as a file with its mode. A listed key the configMap
// lacks is an error unless optional.
func ConfigMapPayload(items []corev1.KeyToPath, cm *corev1.ConfigMap, defaultMode *int32, optional bool) (map[string]FileProjection, error) {
	mode := modeOr(defaultMode)
	payload := make(map[string]FileProjection, len(cm.Data)+len(cm.BinaryData))
	if len(items) == 0 {
		for k, v := range cm.Data {
			payload[k] = FileProjection{Data: []byte(v), Mode: mode}
		}
		for k, v := range cm.BinaryData {
			payload[k] = FileProjection{Data: v, Mode: mode}
		}
		return payload, nil
	}
	for _, it := range items {
		var data []byte
		if s, ok := cm.Data[it.Key]; ok {
			data = []byte(s)
		} else if b, ok := cm.BinaryData[it.Key]; ok {
			data = b
		} else {
			if optional {
				continue
			}
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		payload[it.Path] = FileProjection{Data: data, Mode: itemMode(it.Mode, mode)}
	}
	return payload, nil
}

// SecretPayload is the kubelet's secret.MakePayload.
func SecretPayload(items []corev1.KeyToPath, s *corev1.Secret, defaultMode *int32, optional bool) (map[string]FileProjection, error) {
	mode := modeOr(defaultMode)
	payload := make(map[string]FileProjection, len(s.Data))
	if len(items) == 0 {
		for k, v := range s.Data {
			payload[k] = FileProjection{Data: v, Mode: mode}
		}
		return payload, nil
	}
	for _, it := range items {
		v, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("references non-existent secret key: %s", it.Key)
		}
		payload[it.Path] = FileProjection{Data: v, Mode: itemMode(it.Mode, mode)}
	}
	return payload, nil
}

// itemMode is an item's own mode, else the volume's.
func itemMode(m *int32, def int32) int32 {
	if m != nil {
		return *m
	}
	return def
}

// FieldRefVersion is the kubelet's ConvertDownwardAPIFieldLabel check of a
// fieldRef's apiVersion: v1 is the only version of the pod's field paths
// (empty, which the API's defaults never leave, is taken as v1).
func FieldRefVersion(ref *corev1.ObjectFieldSelector) error {
	if ref.APIVersion != "" && ref.APIVersion != "v1" {
		return fmt.Errorf("unsupported pod version: %s", ref.APIVersion)
	}
	return nil
}

func fieldRefValue(pod *corev1.Pod, ref *corev1.ObjectFieldSelector) (string, error) {
	if err := FieldRefVersion(ref); err != nil {
		return "", err
	}
	return PodFieldValue(pod, ref.FieldPath)
}

// DownwardAPIPayload is the kubelet's downwardapi.CollectData: each item's
// field or container resource as a file. Resource limits a container does
// not set default to allocatable (the node's).
func DownwardAPIPayload(items []corev1.DownwardAPIVolumeFile, pod *corev1.Pod, allocatable corev1.ResourceList, defaultMode *int32) (map[string]FileProjection, error) {
	mode := modeOr(defaultMode)
	payload := make(map[string]FileProjection, len(items))
	var errs []string
	for _, it := range items {
		fp := FileProjection{Mode: itemMode(it.Mode, mode)}
		switch {
		case it.FieldRef != nil:
			v, err := fieldRefValue(pod, it.FieldRef)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			fp.Data = []byte(v)
		case it.ResourceFieldRef != nil:
			v, err := ContainerResourceValue(pod, it.ResourceFieldRef.ContainerName, it.ResourceFieldRef, allocatable)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			fp.Data = []byte(v)
		}
		payload[filepath.Clean(it.Path)] = fp
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, ", "))
	}
	return payload, nil
}

// PodFieldValue is the kubelet's fieldpath.ExtractFieldPathAsString for
// the fields a downwardAPI volume may project.
func PodFieldValue(pod *corev1.Pod, fieldPath string) (string, error) {
	if path, sub, ok := splitSubscript(fieldPath); ok {
		switch path {
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(sub)); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Annotations[sub], nil
		case "metadata.labels":
			if errs := validation.IsQualifiedName(sub); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Labels[sub], nil
		default:
			return "", fmt.Errorf("fieldPath %q does not support subscript", fieldPath)
		}
	}
	switch fieldPath {
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", fieldPath)
}

// splitSubscript splits "path['key']".
func splitSubscript(fieldPath string) (string, string, bool) {
	if !strings.HasSuffix(fieldPath, "']") {
		return fieldPath, "", false
	}
	path, sub, ok := strings.Cut(strings.TrimSuffix(fieldPath, "']"), "['")
	if !ok {
		return fieldPath, "", false
	}
	return path, sub, true
}

// formatMap renders labels or annotations as the kubelet does: sorted
// key="quoted value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// ContainerResourceValue is the kubelet's
// ExtractResourceValueByContainerNameAndNodeAllocatable: a container's
// request or limit in units of the divisor (rounded up), limits the
// container does not set taken from allocatable.
func ContainerResourceValue(pod *corev1.Pod, containerName string, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	var c *corev1.Container
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == containerName {
				c = &list[i]
			}
		}
	}
	if c == nil {
		return "", fmt.Errorf("container %s not found", containerName)
	}
	limits := corev1.ResourceList{}
	for k, v := range c.Resources.Limits {
		limits[k] = v
	}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := limits[n]; !ok || q.IsZero() {
			if a, ok := allocatable[n]; ok {
				limits[n] = a.DeepCopy()
			}
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	get := func(l corev1.ResourceList, n corev1.ResourceName) resource.Quantity {
		return l[n]
	}
	cpu := func(q resource.Quantity) string {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10)
	}
	value := func(q resource.Quantity) string {
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10)
	}
	switch ref.Resource {
	case "limits.cpu":
		return cpu(get(limits, corev1.ResourceCPU)), nil
	case "requests.cpu":
		return cpu(get(c.Resources.Requests, corev1.ResourceCPU)), nil
	case "limits.memory":
		return value(get(limits, corev1.ResourceMemory)), nil
	case "requests.memory":
		return value(get(c.Resources.Requests, corev1.ResourceMemory)), nil
	case "limits.ephemeral-storage":
		return value(get(limits, corev1.ResourceEphemeralStorage)), nil
	case "requests.ephemeral-storage":
		return value(get(c.Resources.Requests, corev1.ResourceEphemeralStorage)), nil
	}
	if n, ok := strings.CutPrefix(ref.Resource, "requests."); ok && strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) {
		return value(get(c.Resources.Requests, corev1.ResourceName(n))), nil
	}
	if n, ok := strings.CutPrefix(ref.Resource, "limits."); ok && strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) {
		return value(get(c.Resources.Limits, corev1.ResourceName(n))), nil
	}
	return "", fmt.Errorf("unsupported container resource : %v", ref.Resource)
}
