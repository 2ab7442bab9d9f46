package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// containerd2 starts a private containerd 2.x (built by
// scripts/containerd2.sh on first use), whatever NODELET_TEST_CONTAINERD
// says. It skips only when 2.x cannot be built here.
func containerd2(t *testing.T) *testenv.Containerd {
	t.Helper()
	testenv.RequiresRoot(t)
	b, err := testenv.Containerd2()
	if err != nil {
		t.Skipf("containerd %s cannot be built here: %v", containerd.Version2, err)
	}
	c := testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 2, Binary: b.Containerd})
	t.Logf("containerd %s slot %d ready in %v", containerd.Version2, c.Slot, c.StartTime)
	return c
}

// TestContainerd2 runs containerd 2.x with the version-3 config that
// internal/containerd renders and checks over CRI what nodelet relies on:
// the version, both readiness conditions, a sandbox and a container from
// the imported busybox image, and GetContainerEvents (implemented on 2.x,
// not on 1.6), which must deliver the container's created, started and
// stopped events with its status, as the kubelet's evented PLEG reads them.
func TestContainerd2(t *testing.T) {
	c := containerd2(t)
	cri := c.RuntimeClient(t)
	ctx := criCtx(t)

	// The config it runs with is version 3, with the CRI plugin split.
	b, err := os.ReadFile(filepath.Join(c.Dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("config.toml: %v", err)
	}
	plugins, _ := doc["plugins"].(map[string]any)
	if doc["version"] != int64(3) || plugins["io.containerd.cri.v1.runtime"] == nil || plugins["io.containerd.cri.v1.images"] == nil {
		t.Fatalf("config.toml is not a version-3 config with the split CRI plugin:\n%s", b)
	}

	v, err := cri.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	if v.RuntimeName != "containerd" || !strings.HasPrefix(v.RuntimeVersion, "v2.") || v.RuntimeApiVersion != "v1" {
		t.Fatalf("Version = %+v, want containerd v2.x, CRI v1", v)
	}
	t.Logf("Version: %s %s (CRI %s)", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	st, err := cri.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		ok := false
		for _, cond := range st.GetStatus().GetConditions() {
			ok = ok || (cond.Type == want && cond.Status)
		}
		if !ok {
			t.Errorf("Status: %s is not true: %v", want, st.GetStatus().GetConditions())
		}
	}

	// The event stream, opened before the pod exists.
	evctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cri.Runtime.GetContainerEvents(evctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatalf("GetContainerEvents: %v", err)
	}
	type event struct {
		*runtimeapi.ContainerEventResponse
		at time.Time
	}
	events := make(chan event, 64)
	go func() {
		defer close(events)
		for {
			e, err := stream.Recv()
			if err != nil {
				if evctx.Err() == nil && !errors.Is(err, io.EOF) {
					t.Errorf("GetContainerEvents: Recv: %v", err)
				}
				return
			}
			events <- event{e, time.Now()}
		}
	}()

	// A container that exits 3 after a moment.
	sandboxID, containerID, _ := runPod(t, cri, "events", "sh", "-c", "sleep 1; exit 3")
	want := []runtimeapi.ContainerEventType{
		runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
	}
	var stopped event
	timeout := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the event stream ended before %v", want)
			}
			t.Logf("event %v of %.12s (sandbox %v, %d container statuses)", e.ContainerEventType, e.ContainerId,
				e.GetPodSandboxStatus().GetState(), len(e.ContainersStatuses))
			if e.ContainerId != containerID {
				continue // the sandbox's own events
			}
			if e.ContainerEventType != want[0] {
				t.Fatalf("event %v of the container, want %v next", e.ContainerEventType, want[0])
			}
			if e.PodSandboxStatus.GetId() != sandboxID {
				t.Errorf("event %v: sandbox status of %q, want %q", e.ContainerEventType, e.PodSandboxStatus.GetId(), sandboxID)
			}
			if e.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
				stopped = e
			}
			want = want[1:]
		case <-timeout:
			t.Fatalf("no %v event of the container in 30s", want[0])
		}
	}
	// The stopped event carries the exit: the status the relist would read.
	var cs *runtimeapi.ContainerStatus
	for _, s := range stopped.ContainersStatuses {
		if s.Id == containerID {
			cs = s
		}
	}
	if cs == nil || cs.State != runtimeapi.ContainerState_CONTAINER_EXITED || cs.ExitCode != 3 {
		t.Fatalf("stopped event's status of the container = %+v, want exited with code 3", cs)
	}
	t.Logf("stopped event %v after the container's exit (finishedAt)", stopped.at.Sub(time.Unix(0, cs.FinishedAt)))

	if _, err := cri.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	for deleted := false; !deleted; {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the event stream ended before the deleted event")
			}
			deleted = e.ContainerId == containerID && e.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
		case <-time.After(10 * time.Second):
			t.Fatal("no deleted event of the container in 10s")
		}
	}
	if _, err := cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
}

// TestContainerEventsUnimplementedOn16: Debian's containerd 1.6 answers
// GetContainerEvents with Unimplemented on the stream's first Recv, which
// is how a client tells it must fall back to containerd's task events.
func TestContainerEventsUnimplementedOn16(t *testing.T) {
	c := testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 1, NoImages: true})
	cri := c.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(criCtx(t), 10*time.Second)
	defer cancel()
	stream, err := cri.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetContainerEvents on 1.6: %v, want Unimplemented", err)
	}
}

// TestContainerd2ExitEvents compares, on 2.x, the two ways a node agent
// learns that a container exited: containerd's own /tasks/exit event (what
// nodelet-runtime follows today, taskevents.go) and CRI's
// CONTAINER_STOPPED_EVENT, which the CRI plugin sends only once it has
// handled the exit (task deleted, status updated), so the status it
// carries is final. Both must arrive for every container; the delays from
// the exit are logged for the exit → status comparison.
func TestContainerd2ExitEvents(t *testing.T) {
	c := containerd2(t)
	cri := c.RuntimeClient(t)
	ctx, cancel := context.WithCancel(criCtx(t))
	defer cancel()

	type arrival struct {
		id string
		at time.Time
	}
	criC := make(chan arrival, 64)
	stream, err := cri.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			e, err := stream.Recv()
			if err != nil {
				return
			}
			if e.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
				criC <- arrival{e.ContainerId, time.Now()}
			}
		}
	}()
	taskC := make(chan arrival, 64)
	sub, err := eventsapi.NewEventsClient(cri.Conn).Subscribe(ctx, &eventsapi.SubscribeRequest{
		Filters: []string{`topic=="/tasks/exit",namespace=="k8s.io"`},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			env, err := sub.Recv()
			if err != nil {
				return
			}
			var e apievents.TaskExit
			if proto.Unmarshal(env.GetEvent().GetValue(), &e) == nil && e.ID == e.ContainerID {
				taskC <- arrival{e.ContainerID, time.Now()}
			}
		}
	}()
	wait := func(ch chan arrival, id, what string) time.Time {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case a := <-ch:
				if a.id == id {
					return a.at
				}
			case <-timeout:
				t.Fatalf("no %s of %s in 30s", what, id)
			}
		}
	}

	const n = 5
	var taskDelays, criDelays []time.Duration
	for i := range n {
		_, id, _ := runPod(t, cri, fmt.Sprintf("exit-%d", i), "sh", "-c", "sleep 0.5; exit 3")
		taskAt := wait(taskC, id, "/tasks/exit event")
		criAt := wait(criC, id, "CRI stopped event")
		st, err := cri.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		finished := time.Unix(0, st.Status.FinishedAt)
		taskDelays = append(taskDelays, taskAt.Sub(finished))
		criDelays = append(criDelays, criAt.Sub(finished))
	}
	slices.Sort(taskDelays)
	slices.Sort(criDelays)
	t.Logf("exit → containerd /tasks/exit: median %v, max %v; exit → CRI CONTAINER_STOPPED_EVENT: median %v, max %v (%d containers)",
		taskDelays[n/2].Round(time.Millisecond), taskDelays[n-1].Round(time.Millisecond),
		criDelays[n/2].Round(time.Millisecond), criDelays[n-1].Round(time.Millisecond), n)
}

// TestContainerd2CDI: containerd 2.x, with the config internal/containerd
// renders (cdi_spec_dirs; CDI itself is always on in 2.x), resolves a container's CRI
// CDIDevices from a CDI spec in its spec dirs and applies its edits — what
// device plugins' and DRA drivers' CDI device names rely on.
func TestContainerd2CDI(t *testing.T) {
	testenv.RequiresRoot(t)
	b, err := testenv.Containerd2()
	if err != nil {
		t.Skipf("containerd %s cannot be built here: %v", containerd.Version2, err)
	}
	specs := t.TempDir()
	spec := `{"cdiVersion": "0.6.0", "kind": "nodelet.test/device",
  "devices": [{"name": "one", "containerEdits": {"env": ["NODELET_CDI_DEVICE=one"]}}]}`
	if err := os.WriteFile(filepath.Join(specs, "nodelet-test.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	c := testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 2, Binary: b.Containerd, CDISpecDirs: []string{specs}})
	cri := c.RuntimeClient(t)
	withDevice := func(cc *runtimeapi.ContainerConfig) {
		cc.CDIDevices = []*runtimeapi.CDIDevice{{Name: "nodelet.test/device=one"}}
	}
	_, id, _ := runPodWith(t, cri, "cdi", withDevice, "sh", "-c", `test "$NODELET_CDI_DEVICE" = one`)
	eventually.True(t, 30*time.Second, "the container to exit", func() bool {
		st, err := cri.Runtime.ContainerStatus(criCtx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			return false
		}
		if st.Status.ExitCode != 0 {
			t.Fatalf("the container did not get the CDI device's edits: exit %d", st.Status.ExitCode)
		}
		return true
	})
	// A device no spec names is refused at creation, naming it.
	ctx := criCtx(t)
	sb, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(sb.Items) == 0 {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	_, err = cri.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.Items[0].Id,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "missing"},
			Image: &runtimeapi.ImageSpec{Image: images.BusyboxImage}, Command: []string{"true"},
			CDIDevices: []*runtimeapi.CDIDevice{{Name: "nodelet.test/device=two"}}},
		SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: sb.Items[0].Metadata}})
	if err == nil || !strings.Contains(err.Error(), "nodelet.test/device=two") {
		t.Fatalf("CreateContainer with an unknown CDI device: %v, want an error naming it", err)
	}
}
