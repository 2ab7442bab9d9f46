package runtime

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// envInputs is what the downward API reads besides the pod.
type envInputs struct {
	PodIPs  []string
	HostIPs []string
	Node    nodeCapacity
	Objects ObjectGetter
	// Services are the service variables (serviceEnv): usable in $(VAR)
	// references, and added after the container's own unless it sets
	// them itself.
	Services map[string]string
	// Volumes are the host paths of the pod's volumes, by name, where
	// fileKeyRef reads its files.
	Volumes map[string]string
}

// containerEnv is the kubelet's makeEnvironmentVariables: envFrom first,
// then env in order, each value with $(VAR) references to the variables
// before it (and to the service variables) expanded, fieldRef and
// resourceFieldRef resolved, configMap/secret keys read through the
// ObjectGetter and fileKeyRef keys from the pod's volumes (envfile.go);
// then the service variables the container does not set itself, by name
// (the kubelet appends them from a map, in no set order).
func containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, in envInputs) ([]string, map[string]string, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
			cm, err := getConfigMap(ctx, in.Objects, pod.Namespace, from.ConfigMapRef.Name)
			if err != nil {
				if optional {
					continue
				}
				return nil, nil, err
			}
			for k, v := range cm.Data {
				set(from.Prefix+k, v)
			}
		case from.SecretRef != nil:
			optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
			s, err := getSecret(ctx, in.Objects, pod.Namespace, from.SecretRef.Name)
			if err != nil {
				if optional {
					continue
				}
				return nil, nil, err
			}
			for k, v := range s.Data {
				set(from.Prefix+k, string(v))
			}
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom == nil {
			set(e.Name, podutil.Expand(v, podutil.MappingFor(env, in.Services)))
			continue
		}
		var err error
		switch f := e.ValueFrom; {
		case f.FieldRef != nil:
			if err = volumes.FieldRefVersion(f.FieldRef); err == nil {
				v, err = fieldValue(pod, f.FieldRef.FieldPath, in)
			}
		case f.ResourceFieldRef != nil:
			v, err = resourceValue(pod, c, f.ResourceFieldRef, in.Node)
		case f.ConfigMapKeyRef != nil:
			ref := f.ConfigMapKeyRef
			optional := ref.Optional != nil && *ref.Optional
			cm, gerr := getConfigMap(ctx, in.Objects, pod.Namespace, ref.Name)
			if gerr != nil {
				if optional {
					continue
				}
				return nil, nil, gerr
			}
			val, ok := cm.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, nil, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			v = val
		case f.SecretKeyRef != nil:
			ref := f.SecretKeyRef
			optional := ref.Optional != nil && *ref.Optional
			s, gerr := getSecret(ctx, in.Objects, pod.Namespace, ref.Name)
			if gerr != nil {
				if optional {
					continue
				}
				return nil, nil, gerr
			}
			val, ok := s.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			v = string(val)
		case f.FileKeyRef != nil:
			val, ok, ferr := fileKeyValue(f.FileKeyRef, in.Volumes)
			if ferr != nil {
				return nil, nil, ferr
			}
			if !ok {
				continue
			}
			v = val
		default:
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	svc := make([]string, 0, len(in.Services))
	for k := range in.Services {
		if _, own := env[k]; !own {
			svc = append(svc, k)
		}
	}
	sort.Strings(svc)
	for _, k := range svc {
		set(k, in.Services[k])
	}
	return order, env, nil
}

func getConfigMap(ctx context.Context, objs ObjectGetter, ns, name string) (*corev1.ConfigMap, error) {
	if objs == nil {
		return nil, fmt.Errorf("configmap %q not found: no API server and no config maps given to the runtime", name)
	}
	cm, err := objs.GetConfigMap(ctx, ns, name)
	if err != nil {
		return nil, fmt.Errorf("configmap %q not found: %w", name, err)
	}
	return cm, nil
}

func getSecret(ctx context.Context, objs ObjectGetter, ns, name string) (*corev1.Secret, error) {
	if objs == nil {
		return nil, fmt.Errorf("secret %q not found: no API server and no secrets given to the runtime", name)
	}
	s, err := objs.GetSecret(ctx, ns, name)
	if err != nil {
		return nil, fmt.Errorf("secret %q not found: %w", name, err)
	}
	return s, nil
}

// fieldValue resolves a downward API fieldRef for env.
func fieldValue(pod *corev1.Pod, path string, in envInputs) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	first := func(l []string) string {
		if len(l) == 0 {
			return ""
		}
		return l[0]
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return first(in.PodIPs), nil
	case "status.podIPs":
		return strings.Join(in.PodIPs, ","), nil
	case "status.hostIP":
		return first(in.HostIPs), nil
	case "status.hostIPs":
		return strings.Join(in.HostIPs, ","), nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// resourceValue resolves a resourceFieldRef as the downward API volume
// does: limits default to the node's capacity, values are rounded up in
// units of the divisor; the container is this one unless the ref names
// another.
func resourceValue(pod *corev1.Pod, self *corev1.Container, ref *corev1.ResourceFieldSelector, node nodeCapacity) (string, error) {
	name := ref.ContainerName
	if name == "" {
		name = self.Name
	}
	return volumes.ContainerResourceValue(pod, name, ref, node.resourceList())
}
