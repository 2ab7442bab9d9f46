package runtime

import (
	"maps"
	"slices"
	"testing"
)

// TestChangedPods: a relist syncs the pods whose CRI state changed, but not
// for the removal of an exited container or of a sandbox no longer ready
// (the kubelet's isSyncPodWorthy leaves ContainerRemoved out), unless the
// pod left CRI altogether.
func TestChangedPods(t *testing.T) {
	base := map[string]string{
		"sb-a": "a ready", "c-a1": "a CONTAINER_EXITED", "c-a2": "a CONTAINER_RUNNING",
		"sb-b": "b notready", "c-b1": "b CONTAINER_EXITED",
		"sb-c": "c notready", "sb-c2": "c ready",
	}
	without := func(ids ...string) map[string]string {
		m := maps.Clone(base)
		for _, id := range ids {
			delete(m, id)
		}
		return m
	}
	with := func(id, v string) map[string]string {
		m := maps.Clone(base)
		m[id] = v
		return m
	}
	for _, tc := range []struct {
		name string
		cur  map[string]string
		want []string
	}{
		{"nothing", base, nil},
		{"an exited container removed", without("c-a1"), nil},
		{"a running container gone", without("c-a2"), []string{"a"}},
		{"a sandbox not ready removed", without("sb-c"), nil},
		{"a ready sandbox gone", without("sb-a"), []string{"a"}},
		{"the pod gone from CRI", without("sb-b", "c-b1"), []string{"b"}},
		{"a container exited", with("c-a2", "a CONTAINER_EXITED"), []string{"a"}},
		{"a new container", with("c-a3", "a CONTAINER_RUNNING"), []string{"a"}},
		{"a new pod", with("sb-d", "d ready"), []string{"d"}},
	} {
		got := slices.Sorted(maps.Keys(changedPods(base, tc.cur)))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.want)
		}
	}
}
