package runtime

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ObjectGetter reads the API objects a pod refers to: image pull secrets,
// and the secrets and config maps of env references. With an API server it
// reads through client-go (see NewAPIObjects); a standalone node may hand
// the runtime a fixed set (StaticObjects), or none.
type ObjectGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// StaticObjects is an ObjectGetter over fixed objects, keyed
// "<namespace>/<name>".
type StaticObjects struct {
	Secrets    map[string]*corev1.Secret
	ConfigMaps map[string]*corev1.ConfigMap
}

func (s StaticObjects) GetSecret(_ context.Context, ns, n string) (*corev1.Secret, error) {
	if o, ok := s.Secrets[ns+"/"+n]; ok {
		return o, nil
	}
	return nil, fmt.Errorf("secret %q not found", ns+"/"+n)
}

func (s StaticObjects) GetConfigMap(_ context.Context, ns, n string) (*corev1.ConfigMap, error) {
	if o, ok := s.ConfigMaps[ns+"/"+n]; ok {
		return o, nil
	}
	return nil, fmt.Errorf("configmap %q not found", ns+"/"+n)
}

// pullSecrets reads the pod's imagePullSecrets (the kubelet's
// getPullSecretsForPod). A secret that cannot be read is reported in the
// error and skipped: the kubelet pulls without it rather than not at all.
// Each secret keeps the pod's namespace and the reference's name, which
// the pull records know it by.
func pullSecrets(ctx context.Context, objs ObjectGetter, pod *corev1.Pod) ([]corev1.Secret, error) {
	var problems []string
	var secrets []corev1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		if objs == nil {
			problems = append(problems, fmt.Sprintf("secret %q: no API server and no secrets given to the runtime", ref.Name))
			continue
		}
		s, err := objs.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %q: %v", ref.Name, err))
			continue
		}
		s = s.DeepCopy()
		s.Namespace, s.Name = pod.Namespace, ref.Name
		secrets = append(secrets, *s)
	}
	if len(problems) > 0 {
		return secrets, fmt.Errorf("image pull secrets: %s", strings.Join(problems, "; "))
	}
	return secrets, nil
}
