package nodestatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

func TestDevicePluginResources(t *testing.T) {
	for _, tc := range []struct {
		name      string
		r         schemas.DeviceResource
		cap, allo int64
	}{
		{"healthy", schemas.DeviceResource{Healthy: []string{"a", "b"}}, 2, 2},
		{"one unhealthy", schemas.DeviceResource{Healthy: []string{"a"}, Unhealthy: []string{"b"}}, 2, 1},
		{"plugin gone", schemas.DeviceResource{Unhealthy: []string{"a", "b"}}, 2, 0},
		{"gone past the grace period", schemas.DeviceResource{Unhealthy: []string{"a", "b"}, Removed: true}, 0, 0},
		{"registered again after a restart", schemas.DeviceResource{}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Name = "example.com/dev"
			c, a := DevicePluginResources(&schemas.DeviceResources{Resources: []schemas.DeviceResource{tc.r}})
			gc, ga := c[corev1.ResourceName(tc.r.Name)], a[corev1.ResourceName(tc.r.Name)]
			if gc.Value() != tc.cap || ga.Value() != tc.allo {
				t.Errorf("capacity %s allocatable %s, want %d and %d", gc.String(), ga.String(), tc.cap, tc.allo)
			}
		})
	}
}
