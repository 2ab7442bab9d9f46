package podutil

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestResourceClaimsAndExtendedResources(t *testing.T) {
	one := resource.MustParse("1")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("c1")}},
		Containers: []corev1.Container{
			{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				"example.com/gpu": one, "deviceclass.resource.kubernetes.io/fast": one, corev1.ResourceCPU: one}}},
			{Name: "b", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"example.com/gpu": resource.MustParse("0")}}},
		}}}
	if got := ResourceClaims(pod); len(got) != 1 || got[0].Name != "gpu" {
		t.Fatalf("without the scheduler's claim: %+v", got)
	}
	if IsDRAExtendedResource(pod, "a", "example.com/gpu") {
		t.Fatal("no mapping yet, but DRA-backed")
	}
	pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-ext",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{
			{ContainerName: "a", ResourceName: "example.com/gpu", RequestName: "r0"},
			{ContainerName: "a", ResourceName: "deviceclass.resource.kubernetes.io/fast", RequestName: "r1"},
			{ContainerName: "a", ResourceName: "example.com/other", RequestName: "r2"},
			{ContainerName: "b", ResourceName: "example.com/gpu", RequestName: "r3"},
		}}
	got := ResourceClaims(pod)
	if len(got) != 2 || got[1].Name != "" || got[1].ResourceClaimName == nil || *got[1].ResourceClaimName != "p-ext" {
		t.Fatalf("with the scheduler's claim: %+v", got)
	}
	if len(pod.Spec.ResourceClaims) != 1 {
		t.Fatal("ResourceClaims changed the pod's spec")
	}
	for _, tc := range []struct {
		container string
		want      []string
	}{
		{"a", []string{"r0", "r1"}}, // r2: a resource a does not ask for
		{"b", nil},                  // asks for 0
		{"c", nil},
	} {
		c := &corev1.Container{Name: tc.container}
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == tc.container {
				c = &pod.Spec.Containers[i]
			}
		}
		claim, reqs := ExtendedResourceRequests(pod, c)
		slices.Sort(reqs)
		if claim != "p-ext" || !slices.Equal(reqs, tc.want) {
			t.Errorf("%s: claim %q requests %v, want p-ext %v", tc.container, claim, reqs, tc.want)
		}
	}
	if !IsDRAExtendedResource(pod, "a", "example.com/gpu") || IsDRAExtendedResource(pod, "b", "example.com/fast") {
		t.Fatal("IsDRAExtendedResource")
	}
	for name, want := range map[corev1.ResourceName]bool{"example.com/gpu": true, "deviceclass.resource.kubernetes.io/fast": true,
		corev1.ResourceCPU: false, "kubernetes.io/x": false} {
		if IsDRAExtendedResourceName(name) != want {
			t.Errorf("IsDRAExtendedResourceName(%s) != %v", name, want)
		}
	}
}
