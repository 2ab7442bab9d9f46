package nodestatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPressureConditions(t *testing.T) {
	for _, tc := range []struct {
		typ                corev1.NodeConditionType
		status             bool
		reason, msg, event string
	}{
		{corev1.NodeMemoryPressure, true, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", "NodeHasInsufficientMemory"},
		{corev1.NodeMemoryPressure, false, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", "NodeHasSufficientMemory"},
		{corev1.NodeDiskPressure, true, "KubeletHasDiskPressure", "kubelet has disk pressure", "NodeHasDiskPressure"},
		{corev1.NodeDiskPressure, false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"},
		{corev1.NodePIDPressure, true, "KubeletHasInsufficientPID", "kubelet has insufficient PID available", "NodeHasInsufficientPID"},
		{corev1.NodePIDPressure, false, "KubeletHasSufficientPID", "kubelet has sufficient PID available", "NodeHasSufficientPID"},
	} {
		var p *Pressure
		for i := range PressureConditions {
			if PressureConditions[i].Type == tc.typ {
				p = &PressureConditions[i]
			}
		}
		if p == nil {
			t.Fatalf("no %s in PressureConditions", tc.typ)
		}
		c := p.Condition(tc.status)
		want := corev1.ConditionFalse
		if tc.status {
			want = corev1.ConditionTrue
		}
		if c.Type != tc.typ || c.Status != want || c.Reason != tc.reason || c.Message != tc.msg {
			t.Errorf("%s %v: condition %+v, want reason %q message %q", tc.typ, tc.status, c, tc.reason, tc.msg)
		}
		if got := p.Event(c.Status); got != tc.event {
			t.Errorf("%s %v: event %q, want %q", tc.typ, tc.status, got, tc.event)
		}
	}
	if got := StatusMessage("n1", "NodeHasDiskPressure"); got != "Node n1 status is now: NodeHasDiskPressure" {
		t.Errorf("StatusMessage = %q", got)
	}
}
