package admission

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// BenchmarkAdmit decides one pod against 110 admitted pods (a full node at
// the default maxPods): usage summed over the 110, then every handler.
func BenchmarkAdmit(b *testing.B) {
	node := testNode(b, func(c *config.Config) {
		c.Node.MaxPods = 111
		c.Node.Labels = map[string]string{"zone": "a"}
		c.Node.Taints = []config.Taint{{Key: "dedicated", Value: "x", Effect: "NoExecute"}}
	})
	c := newController(bustest.Logger(), nil, func(bool, string) {}, clocktesting.NewFakePassiveClock(epoch), node, nil, false)
	for i := 0; i < 110; i++ {
		p := makePod(fmt.Sprintf("p%03d", i), i, withRequests("cpu", "10m", "memory", "16Mi"),
			withHostPort(int32(20000+i), "", ""), withToleration("dedicated", "x", corev1.TaintEffectNoExecute))
		uid := string(p.UID)
		c.pods[uid] = &podEntry{desired: &schemas.PodDesired{Pod: p}, rev: uint64(i + 1), info: NewPodInfo(p)}
		c.verdicts[uid] = &schemas.AdmissionVerdict{UID: uid, Admitted: true}
		c.observed[uid] = &schemas.PodObserved{UID: uid, Containers: []schemas.ContainerObserved{{Name: "c"}}}
	}
	p := makePod("new", 200, withRequests("cpu", "100m", "memory", "64Mi"), withHostPort(8080, "", ""),
		withNodeSelector("zone", "a"), withToleration("dedicated", "x", corev1.TaintEffectNoExecute))
	e := &podEntry{desired: &schemas.PodDesired{Pod: p}, rev: 500}
	if v, _ := c.decide(string(p.UID), e); !v.Admitted {
		b.Fatalf("want admitted, got %+v", v)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.decide(string(p.UID), e)
	}
}
