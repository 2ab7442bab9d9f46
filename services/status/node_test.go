package status

import (
	"errors"
	goruntime "runtime"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/version"
	"github.com/nodelet/nodelet/schemas"
)

func testMachine() *cadvisorapi.MachineInfo {
	return &cadvisorapi.MachineInfo{
		NumCores: 2, MemoryCapacity: 4 << 30, MachineID: "m1", SystemUUID: "s1", BootID: "b1",
		HugePages: []cadvisorapi.HugePagesInfo{{PageSize: 2048, NumPages: 10}},
	}
}

func nodeInputs(mut func(*NodeInputs)) NodeInputs {
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	in := NodeInputs{
		Name: "node-1", Hostname: "host-1", Addresses: []string{"192.168.1.10"}, Config: cfg,
		Machine: testMachine(), RootFs: &hostinfo.FsStats{Capacity: 100 << 30},
		Runtime:        &schemas.RuntimeState{RuntimeReady: true, NetworkReady: true},
		RuntimeVersion: "containerd://1.6.20", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12 (bookworm)",
		Now: t0,
	}
	if mut != nil {
		mut(&in)
	}
	return in
}

func nodeCond(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func TestInitialNode(t *testing.T) {
	in := nodeInputs(func(in *NodeInputs) {
		in.Config.Node.Labels = map[string]string{"zone": "a", corev1.LabelHostname: "override"}
		in.Config.Node.Taints = []config.Taint{{Key: "dedicated", Value: "db", Effect: "NoSchedule"}}
	})
	n, err := InitialNode(in)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, n.Name, "node-1", "name")
	expect(t, n.Labels[corev1.LabelOSStable], goruntime.GOOS, "os label")
	expect(t, n.Labels[corev1.LabelArchStable], goruntime.GOARCH, "arch label")
	expect(t, n.Labels["zone"], "a", "node.labels")
	expect(t, n.Labels[corev1.LabelHostname], "override", "node.labels win over defaults, as in the kubelet")
	expect(t, n.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"], "true", "attach-detach annotation")
	existing := &corev1.Node{}
	if !reconcileExistingNode(n, existing) || existing.Annotations["volumes.kubernetes.io/controller-managed-attach-detach"] != "true" {
		t.Errorf("an existing node does not get the attach-detach annotation: %+v", existing.Annotations)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule || n.Spec.Taints[0].Value != "db" {
		t.Errorf("taints = %+v", n.Spec.Taints)
	}
}

func TestSetNodeStatus(t *testing.T) {
	tests := []struct {
		name  string
		in    NodeInputs
		check func(t *testing.T, n *corev1.Node, events []nodeEvent)
	}{{
		name: "capacity from cAdvisor, allocatable minus reservations and hard eviction",
		in: nodeInputs(func(in *NodeInputs) {
			in.Config.Node.KubeReserved = map[string]string{"cpu": "100m", "memory": "100Mi"}
			in.Config.Node.SystemReserved = map[string]string{"cpu": "100m", "ephemeral-storage": "1Gi"}
			in.Config.Node.MaxPods = 50
		}),
		check: func(t *testing.T, n *corev1.Node, _ []nodeEvent) {
			c, a := n.Status.Capacity, n.Status.Allocatable
			expect(t, c.Cpu().MilliValue(), int64(2000), "cpu capacity")
			expect(t, c.Memory().Value(), int64(4<<30), "memory capacity")
			expect(t, c.Pods().Value(), int64(50), "pods")
			expect(t, c.StorageEphemeral().Value(), int64(100<<30), "ephemeral-storage")
			hp := c[corev1.ResourceName("hugepages-2Mi")]
			expect(t, hp.Value(), int64(20<<20), "hugepages-2Mi")
			expect(t, a.Cpu().MilliValue(), int64(1800), "cpu allocatable")
			// 4Gi - 100Mi kube-reserved - 100Mi eviction - 20Mi huge pages.
			expect(t, a.Memory().Value(), int64(4<<30-220<<20), "memory allocatable")
			// 100Gi - 1Gi reserved - 10% eviction.
			expect(t, a.StorageEphemeral().Value(), int64(100<<30-1<<30-10<<30), "ephemeral-storage allocatable")
		},
	}, {
		name: "node info and addresses",
		in:   nodeInputs(nil),
		check: func(t *testing.T, n *corev1.Node, _ []nodeEvent) {
			ni := n.Status.NodeInfo
			expect(t, ni.ContainerRuntimeVersion, "containerd://1.6.20", "runtime version")
			expect(t, ni.KubeletVersion, version.Kubelet(), "kubelet version")
			expect(t, ni.MachineID, "m1", "machineID")
			expect(t, ni.BootID, "b1", "bootID")
			expect(t, ni.KernelVersion, "6.1.0", "kernel")
			expect(t, ni.OperatingSystem, goruntime.GOOS, "os")
			expect(t, ni.Architecture, goruntime.GOARCH, "arch")
			expect(t, len(n.Status.Addresses), 2, "addresses")
			expect(t, n.Status.Addresses[0], corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.1.10"}, "InternalIP")
			expect(t, n.Status.Addresses[1], corev1.NodeAddress{Type: corev1.NodeHostName, Address: "host-1"}, "Hostname")
			expect(t, n.Status.DaemonEndpoints.KubeletEndpoint.Port, int32(10250), "kubelet endpoint port (server.port)")
		},
	}, {
		name: "runtime and network ready: Ready, pressure conditions False, Ready last",
		in:   nodeInputs(nil),
		check: func(t *testing.T, n *corev1.Node, events []nodeEvent) {
			expect(t, nodeCond(n, corev1.NodeReady).Status, corev1.ConditionTrue, "Ready")
			expect(t, nodeCond(n, corev1.NodeReady).Reason, "KubeletReady", "Ready reason")
			expect(t, n.Status.Conditions[len(n.Status.Conditions)-1].Type, corev1.NodeReady, "last condition")
			for _, ct := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
				expect(t, nodeCond(n, ct).Status, corev1.ConditionFalse, string(ct))
			}
			reasons := map[string]bool{}
			for _, e := range events {
				reasons[e.Reason] = true
			}
			for _, r := range []string{"NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID", EventNodeReady} {
				if !reasons[r] {
					t.Errorf("no %s event among %v", r, events)
				}
			}
		},
	}, {
		name: "network not ready: NotReady naming it",
		in: nodeInputs(func(in *NodeInputs) {
			in.Runtime = &schemas.RuntimeState{RuntimeReady: true, Reason: "NetworkPluginNotReady", Message: "cni plugin not initialized"}
		}),
		check: func(t *testing.T, n *corev1.Node, _ []nodeEvent) {
			c := nodeCond(n, corev1.NodeReady)
			expect(t, c.Status, corev1.ConditionFalse, "Ready")
			expect(t, c.Reason, "KubeletNotReady", "reason")
			expect(t, c.Message, "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized", "message")
		},
	}, {
		name: "node shutting down: NotReady as the kubelet's shutdown manager says",
		in: nodeInputs(func(in *NodeInputs) {
			in.Pressure = &schemas.NodePressure{ShuttingDown: true}
		}),
		check: func(t *testing.T, n *corev1.Node, _ []nodeEvent) {
			c := nodeCond(n, corev1.NodeReady)
			expect(t, c.Status, corev1.ConditionFalse, "Ready")
			expect(t, c.Reason, "KubeletNotReady", "reason")
			expect(t, c.Message, "node is shutting down", "message")
		},
	}, {
		name: "no runtime state yet: NotReady",
		in:   nodeInputs(func(in *NodeInputs) { in.Runtime = nil }),
		check: func(t *testing.T, n *corev1.Node, _ []nodeEvent) {
			expect(t, nodeCond(n, corev1.NodeReady).Status, corev1.ConditionFalse, "Ready")
		},
	}, {
		name: "no machine info: NotReady with the error",
		in:   nodeInputs(func(in *NodeInputs) { in.Machine, in.MachineErr = nil, errors.New("cAdvisor machine info: boom") }),
		check: func(t *testing.T, n *corev1.Node, _ []nodeEvent) {
			c := nodeCond(n, corev1.NodeReady)
			expect(t, c.Status, corev1.ConditionFalse, "Ready")
			expect(t, c.Message, "cAdvisor machine info: boom", "message")
		},
	}, {
		name: "memory pressure from nodelet-gc",
		in: nodeInputs(func(in *NodeInputs) {
			in.Pressure = &schemas.NodePressure{Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue,
				Reason: "KubeletHasInsufficientMemory", Message: "kubelet has insufficient memory available"}}}
		}),
		check: func(t *testing.T, n *corev1.Node, events []nodeEvent) {
			expect(t, nodeCond(n, corev1.NodeMemoryPressure).Status, corev1.ConditionTrue, "MemoryPressure")
			expect(t, nodeCond(n, corev1.NodeDiskPressure).Status, corev1.ConditionFalse, "DiskPressure")
			found := false
			for _, e := range events {
				found = found || e.Reason == "NodeHasInsufficientMemory"
			}
			if !found {
				t.Errorf("no NodeHasInsufficientMemory event in %v", events)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := InitialNode(tc.in)
			events := mustSetNodeStatus(t, n, tc.in)
			tc.check(t, n, events)
		})
	}
}

func TestNodeStatusTransitions(t *testing.T) {
	in := nodeInputs(nil)
	n, _ := InitialNode(in)
	mustSetNodeStatus(t, n, in)
	first := n.DeepCopy()

	// Ten seconds later with nothing new: only heartbeats move.
	in.Now = t0.Add(10 * time.Second)
	events := mustSetNodeStatus(t, n, in)
	if len(events) != 0 {
		t.Errorf("events without a transition: %v", events)
	}
	if nodeStatusHasChanged(&first.Status, &n.Status) {
		t.Error("a heartbeat alone counts as a change")
	}
	expect(t, nodeCond(n, corev1.NodeReady).LastHeartbeatTime.Time, in.Now, "heartbeat")
	expect(t, nodeCond(n, corev1.NodeReady).LastTransitionTime.Time, t0, "transition time kept")

	// The runtime goes down: a change, a NodeNotReady event, a new transition time.
	in.Now = t0.Add(20 * time.Second)
	in.Runtime = &schemas.RuntimeState{RuntimeReady: false, NetworkReady: true, Reason: "Down", Message: "socket gone"}
	events = mustSetNodeStatus(t, n, in)
	if !nodeStatusHasChanged(&first.Status, &n.Status) {
		t.Error("Ready going False is not a change")
	}
	if len(events) != 1 || events[0].Reason != EventNodeNotReady || events[0].Message != "Node node-1 status is now: NodeNotReady" {
		t.Errorf("events = %v", events)
	}
	expect(t, nodeCond(n, corev1.NodeReady).LastTransitionTime.Time, in.Now, "transition time")

	// A new boot ID: the kubelet's Rebooted warning.
	in.Machine = testMachine()
	in.Machine.BootID = "b2"
	events = mustSetNodeStatus(t, n, in)
	if len(events) != 1 || events[0].Reason != EventNodeRebooted || events[0].Type != corev1.EventTypeWarning {
		t.Errorf("events after reboot = %v", events)
	}
}

func TestImagesForNode(t *testing.T) {
	var infos []imageInfo
	for i := range 60 {
		infos = append(infos, imageInfo{tags: []string{"t1", "t2", "t3"}, digests: []string{"d1", "d2", "d3"}, size: int64(i)})
	}
	out := imagesForNode(infos)
	expect(t, len(out), nodeStatusMaxImages, "images")
	expect(t, out[0].SizeBytes, int64(59), "biggest first")
	expect(t, len(out[0].Names), maxNamesPerImageInNodeStatus, "names per image")
	expect(t, out[0].Names[0], "d1", "digests first")
}

// The runtime's volumes in use become the Node's status.volumesInUse (the
// kubelet's setVolumesInUse); none when the record is gone.
func TestNodeVolumesInUse(t *testing.T) {
	in := nodeInputs(func(in *NodeInputs) {
		in.VolumesInUse = &schemas.VolumesInUse{Names: []string{"kubernetes.io/csi/d^a", "kubernetes.io/csi/d^b"}}
	})
	n, _ := InitialNode(in)
	mustSetNodeStatus(t, n, in)
	if len(n.Status.VolumesInUse) != 2 || n.Status.VolumesInUse[1] != "kubernetes.io/csi/d^b" {
		t.Fatalf("volumesInUse %v", n.Status.VolumesInUse)
	}
	in.VolumesInUse = nil
	mustSetNodeStatus(t, n, in)
	if n.Status.VolumesInUse != nil {
		t.Fatalf("volumesInUse %v after the record went", n.Status.VolumesInUse)
	}
}

// mustSetNodeStatus is SetNodeStatus for inputs that must succeed.
func mustSetNodeStatus(t *testing.T, n *corev1.Node, in NodeInputs) []nodeEvent {
	t.Helper()
	events, err := SetNodeStatus(n, in)
	if err != nil {
		t.Fatalf("SetNodeStatus: %v", err)
	}
	return events
}

// TestNodeDevicePluginResources: the node reports each device plugin
// resource as the kubelet does: every device in capacity, the healthy ones
// in allocatable, 0 allocatable once the plugin is gone, and the resource
// kept at 0 once its grace period ended.
func TestNodeDevicePluginResources(t *testing.T) {
	const name = corev1.ResourceName("example.com/dev")
	in := nodeInputs(func(in *NodeInputs) {
		in.Devices = &schemas.DeviceResources{Resources: []schemas.DeviceResource{
			{Name: string(name), Endpoint: "/x.sock", Healthy: []string{"a", "b"}, Unhealthy: []string{"c"}}}}
	})
	n, _ := InitialNode(in)
	for _, step := range []struct {
		what      string
		r         schemas.DeviceResource
		cap, allo int64
	}{
		{"registered", schemas.DeviceResource{Healthy: []string{"a", "b"}, Unhealthy: []string{"c"}}, 3, 2},
		{"plugin gone", schemas.DeviceResource{Unhealthy: []string{"a", "b", "c"}}, 3, 0},
		{"removed", schemas.DeviceResource{Unhealthy: []string{"a", "b", "c"}, Removed: true}, 0, 0},
	} {
		step.r.Name = string(name)
		in.Devices = &schemas.DeviceResources{Resources: []schemas.DeviceResource{step.r}}
		mustSetNodeStatus(t, n, in)
		c, a := n.Status.Capacity[name], n.Status.Allocatable[name]
		if c.Value() != step.cap || a.Value() != step.allo {
			t.Errorf("%s: capacity %s allocatable %s, want %d and %d", step.what, c.String(), a.String(), step.cap, step.allo)
		}
	}
}
