package runtime

import (
	"testing"

	"github.com/nodelet/nodelet/internal/cgroups"
)

// widen is the pod cgroup config applied before the containers are
// updated: limits grow first and shares shrink first (the kubelet's
// doPodResizeAction order), so no container ever exceeds its pod.
func TestWidenPodCgroup(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	period := u(100000)
	for _, tc := range []struct {
		name          string
		cur, want     cgroups.ResourceConfig
		quota, memory int64
		shares        uint64
	}{
		{"grow", cgroups.ResourceConfig{CPUQuota: i(20000), Memory: i(64 << 20), CPUShares: u(102)},
			cgroups.ResourceConfig{CPUQuota: i(40000), CPUPeriod: period, Memory: i(128 << 20), CPUShares: u(204)}, 40000, 128 << 20, 102},
		{"shrink", cgroups.ResourceConfig{CPUQuota: i(40000), Memory: i(128 << 20), CPUShares: u(204)},
			cgroups.ResourceConfig{CPUQuota: i(15000), CPUPeriod: period, Memory: i(64 << 20), CPUShares: u(51)}, 40000, 128 << 20, 51},
		{"from unlimited", cgroups.ResourceConfig{CPUQuota: i(-1), Memory: i(-1), CPUShares: u(2)},
			cgroups.ResourceConfig{CPUQuota: i(15000), CPUPeriod: period, Memory: i(64 << 20), CPUShares: u(51)}, -1, -1, 2},
	} {
		got := widen(&tc.cur, &tc.want)
		if *got.CPUQuota != tc.quota || *got.Memory != tc.memory || *got.CPUShares != tc.shares {
			t.Errorf("%s: quota %d memory %d shares %d", tc.name, *got.CPUQuota, *got.Memory, *got.CPUShares)
		}
	}
}
