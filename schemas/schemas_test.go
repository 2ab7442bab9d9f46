package schemas

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestJSONSchemaFilesUpToDate(t *testing.T) {
	docs, err := JSONSchemas()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("v1", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(docs) {
		t.Errorf("schemas/v1 has %d files, want %d: run go generate ./schemas/...", len(files), len(docs))
	}
	for name, want := range docs {
		got, err := os.ReadFile(filepath.Join("v1", name))
		if err != nil {
			t.Errorf("%s: %v: run go generate ./schemas/...", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./schemas/...", name)
		}
	}
}

func samplePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1",
			Annotations: map[string]string{"kubernetes.io/config.source": "file"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "nodelet.local/busybox:1.35",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("250m")}},
		}}},
	}
}

// samples returns one filled-in value of every message type.
func samples() []Message {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	grace := int64(5)
	used := uint64(4096)
	return []Message{
		&PodDesired{Pod: samplePod(), Source: SourceFile, FirstSeen: now},
		&SourcesReady{Configured: []string{"file", "api"}, Ready: []string{"file"}},
		&AdmissionVerdict{UID: "u1", Namespace: "default", Name: "web", Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu", DesiredRevision: 7, DecidedAt: now},
		&PodObserved{UID: "u1", Namespace: "default", Name: "web", Generation: 3,
			Sandbox: &SandboxObserved{ID: "s1", Ready: true, IPs: []string{"10.88.0.2"}, CreatedAt: now},
			Containers: []ContainerObserved{{Name: "c", Kind: ContainerKindApp, ContainerID: "containerd://abc", RestartCount: 2,
				State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}},
		&ProbeResult{UID: "u1", Container: "c", Probe: ProbeLiveness, Result: ProbeFailure, Message: "Liveness probe failed: x", Since: now, TerminationGracePeriodSeconds: &grace},
		&PodStatusRecord{UID: "u1", Name: "web", Namespace: "default", Static: true, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.2"}},
		&VolumesInUse{Names: []string{"kubernetes.io/csi/d^h"}},
		&DeviceResources{Resources: []DeviceResource{{Name: "example.com/resource", Endpoint: "/var/lib/kubelet/device-plugins/dp.sock",
			PreStartRequired: true, Healthy: []string{"Dev-1"}, Unhealthy: []string{"Dev-2"}}}},
		&PodDevices{UID: "u1", Namespace: "ns", Name: "p", AllocatedAt: now, Containers: []ContainerDevices{{Name: "c",
			Resources: []ResourceAllocation{{Resource: "example.com/resource", DeviceIDs: []string{"Dev-1"},
				Envs: map[string]string{"A": "1"}, Mounts: []DeviceMount{{ContainerPath: "/dev/x", HostPath: "/tmp/x", ReadOnly: true}},
				Devices:     []DeviceSpec{{ContainerPath: "/dev/d", HostPath: "/dev/null", Permissions: "rw"}},
				Annotations: map[string]string{"k": "v"}, CDIDevices: []string{"vendor.com/class=dev1"}}}}}},
		&PodClaims{UID: "u1", Namespace: "ns", Name: "p", Prepared: true, UpdatedAt: now, Claims: []PreparedClaim{{
			PodClaimName: "gpu", Name: "p-gpu", UID: "c1", Drivers: []string{"gpu.example.com"}, Prepared: true,
			Devices: []PreparedDevice{{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0", Requests: []string{"r"},
				CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}}}}}},
		&DRAHealth{Devices: []DRADeviceHealth{{Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0", Health: "Unhealthy",
			Message: "ECC errors", LastUpdated: now, Timeout: 30 * time.Second}}},
		&RuntimeState{RuntimeReady: true, NetworkReady: false, Reason: "NetworkPluginNotReady", Message: "plugin foo missing"},
		&PodVolumeStats{Time: now, Pods: map[string][]statsapi.VolumeStats{"u1": {{Name: "data",
			PVCRef: &statsapi.PVCReference{Name: "data", Namespace: "default"}, FsStats: statsapi.FsStats{UsedBytes: &used}}}}},
		&NodePressure{Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}}},
		&PodEviction{UID: "u1", Reason: "Evicted", Message: "The node was low on resource: memory.", Time: now},
		&ImageRecord{ID: "sha256:abc", RepoTags: []string{"a:b"}, FirstSeen: now, LastUsed: now},
		&NodeRecord{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}},
		&Event{Component: "runtime", Object: corev1.ObjectReference{Kind: "Pod", Name: "web", Namespace: "default", UID: "u1"}, Type: corev1.EventTypeNormal, Reason: "Started", Message: "Started container c", Time: now},
		&Heartbeat{Component: "sources", Version: "dev", PID: 42, StartTime: now, Ready: true},
	}
}

func TestEveryMessageTypeRoundTrips(t *testing.T) {
	s := samples()
	if len(s) != len(All()) {
		t.Fatalf("samples() covers %d types, All() lists %d", len(s), len(All()))
	}
	for _, m := range s {
		t.Run(m.SchemaName(), func(t *testing.T) {
			b, err := Encode("test", m)
			if err != nil {
				t.Fatal(err)
			}
			env, err := Open(b)
			if err != nil {
				t.Fatal(err)
			}
			if env.Schema != m.SchemaName() || env.Producer != "test" || env.Time.IsZero() {
				t.Fatalf("envelope = %+v", env)
			}
			got := reflect.New(reflect.TypeOf(m).Elem()).Interface()
			if err := DecodeInto(b, got.(Message)); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalise(t, got), normalise(t, m)) {
				t.Errorf("round trip changed the message:\n got %#v\nwant %#v", got, m)
			}
		})
	}
}

// normalise re-encodes v so that time zones and quantities compare by value.
func normalise(t *testing.T, v any) string {
	b, err := Encode("n", v.(Message))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := Open(b)
	return string(env.Data)
}

func TestDecodeAcceptsUnknownFields(t *testing.T) {
	b := []byte(`{"schema":"nodelet.v1.Heartbeat","producer":"x","time":"2026-12-02T10:00:00Z","future":1,
		"data":{"component":"gc","pid":7,"ready":true,"newField":{"a":[1,2]}}}`)
	env, hb, err := Decode[Heartbeat](b)
	if err != nil {
		t.Fatal(err)
	}
	if env.Producer != "x" || hb.Component != "gc" || hb.PID != 7 || !hb.Ready {
		t.Fatalf("decoded %+v %+v", env, hb)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, errContains string
		mismatch              bool
	}{
		{"not json", `{{`, "decode envelope", false},
		{"no schema", `{"data":{}}`, "no schema", false},
		{"other schema", `{"schema":"nodelet.v1.Event","data":{}}`, "want nodelet.v1.Heartbeat", true},
		{"bad data", `{"schema":"nodelet.v1.Heartbeat","data":{"pid":"seven"}}`, "decode nodelet.v1.Heartbeat", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode[Heartbeat]([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.errContains) {
				t.Fatalf("err = %v, want containing %q", err, tc.errContains)
			}
			if errors.Is(err, ErrSchemaMismatch) != tc.mismatch {
				t.Fatalf("errors.Is(ErrSchemaMismatch) = %v", !tc.mismatch)
			}
		})
	}
}

// FuzzDecode: whatever bytes arrive on the bus, decoding them as any
// message type a daemon reads (every type of All) never panics, and what
// decodes can be written back (a daemon that took a value may publish it
// again) and reads back as the same bytes. Seeds: a sample of every type,
// and testdata/fuzz/FuzzDecode. Longer: go test ./schemas -run '^$' -fuzz
// FuzzDecode -fuzztime 10m.
func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		b, _ := Encode("f", m)
		f.Add(b)
	}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, proto := range All() {
			typ := reflect.TypeOf(proto)
			v := reflect.New(typ).Interface().(Message)
			if err := DecodeInto(b, v); err != nil {
				continue
			}
			again, err := EncodeAt("fuzz", at, v)
			if err != nil {
				t.Fatalf("%s decodes but does not encode: %v", v.SchemaName(), err)
			}
			w := reflect.New(typ).Interface().(Message)
			if err := DecodeInto(again, w); err != nil {
				t.Fatalf("%s as written does not decode: %v\n%s", v.SchemaName(), err, again)
			}
			if third, err := EncodeAt("fuzz", at, w); err != nil || !bytes.Equal(third, again) {
				t.Fatalf("%s does not survive a second round trip: %v\n%s\n%s", v.SchemaName(), err, again, third)
			}
		}
	})
}
