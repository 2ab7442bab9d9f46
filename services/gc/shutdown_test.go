package gc

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's migrateConfig and groupByPriority: non-critical pods get
// shutdownGracePeriod - shutdownGracePeriodCriticalPods, pods of
// system-critical priority the critical share; off without a period.
func TestShutdownGroups(t *testing.T) {
	pod := func(name string, priority *int32) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{Priority: priority}}
	}
	p := func(v int32) *int32 { return &v }
	pods := []*corev1.Pod{pod("none", nil), pod("low", p(-5)), pod("high", p(1000)), pod("cluster-critical", p(2000000000)), pod("node-critical", p(2000001000))}
	groups := shutdownGroups(30*time.Second, 10*time.Second, pods)
	if len(groups) != 2 || groups[0].GracePeriod != 20 || groups[1].GracePeriod != 10 {
		t.Fatalf("groups %+v", groups)
	}
	names := func(g shutdownGroup) (out []string) {
		for _, p := range g.Pods {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(groups[0]); len(got) != 3 || got[0] != "high" || got[1] != "low" || got[2] != "none" {
		t.Errorf("non-critical group %v", got)
	}
	if got := names(groups[1]); len(got) != 2 || got[0] != "cluster-critical" || got[1] != "node-critical" {
		t.Errorf("critical group %v", got)
	}
	if g := shutdownGroups(0, 0, pods); g != nil {
		t.Errorf("off: %+v", g)
	}
	if g := shutdownGroups(10*time.Second, 0, pods); g[0].GracePeriod != 10 || g[1].GracePeriod != 0 {
		t.Errorf("no critical share: %+v", g)
	}
}
