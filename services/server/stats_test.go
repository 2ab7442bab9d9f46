package server

import (
	"strconv"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/hostinfo"
)

// TestStatsForgetGoneContainers: the CPU readings kept to derive
// usageNanoCores are dropped with the containers and sandboxes they belong
// to (issue 37: statsProvider.cpu grew with every pod the node ever ran).
func TestStatsForgetGoneContainers(t *testing.T) {
	rt := critest.NewFakeRuntimeService()
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	p := &statsProvider{nodeName: "n", stateDir: t.TempDir(), cri: &cri.Clients{Runtime: rt, Image: critest.NewFakeImageService()}, clock: clk, machine: &hostinfo.Machine{}}
	pod := func(i int) (*critest.FakePodSandbox, *critest.FakeContainer) {
		sb := &critest.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
			Id: "sb" + strconv.Itoa(i), State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u" + strconv.Itoa(i)}}}
		c := &critest.FakeContainer{SandboxID: sb.Id, ContainerStatus: runtimeapi.ContainerStatus{
			Id: "c" + strconv.Itoa(i), State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"}}}
		return sb, c
	}
	scrape := func(n int, cpu uint64) {
		t.Helper()
		var sbs []*critest.FakePodSandbox
		var cs []*critest.FakeContainer
		var stats []*runtimeapi.ContainerStats
		for i := range n {
			sb, c := pod(i)
			sbs, cs = append(sbs, sb), append(cs, c)
			stats = append(stats, &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{Id: c.Id},
				Cpu: &runtimeapi.CpuUsage{UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}}})
		}
		rt.SetFakeSandboxes(sbs)
		rt.SetFakeContainers(cs)
		rt.SetFakeContainerStats(stats)
		clk.SetTime(clk.Now().Add(10 * time.Second))
		if _, err := p.Summary(t.Context(), true); err != nil {
			t.Fatal(err)
		}
	}
	scrape(3, 1e9)
	scrape(3, 2e9)
	// Per running pod: its container, and its pod's sum of them; and the node.
	if got, want := len(p.cpu), 3*2+1; got != want {
		t.Fatalf("readings with 3 pods: %d, want %d: %v", got, want, p.cpu)
	}
	scrape(1, 3e9)
	if got, want := len(p.cpu), 1*2+1; got != want {
		t.Errorf("readings after 2 of 3 pods went: %d, want %d: %v", got, want, p.cpu)
	}
	for _, id := range []string{"c1", "c2", "containers/sb1", "containers/sb2"} {
		if _, ok := p.cpu[id]; ok {
			t.Errorf("reading of gone %s kept", id)
		}
	}
}
