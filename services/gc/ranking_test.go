package gc

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/config"
)

func rankTestPod(name string, prio int32, memRequest, diskRequest string) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.UID = name, k8stypes.UID(name)
	p.Spec.Priority = &prio
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	if memRequest != "" {
		c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(memRequest)
	}
	if diskRequest != "" {
		c.Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse(diskRequest)
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

func usageOf(mem, rootfs, logs, procs int64) *PodUsage {
	return &PodUsage{Processes: procs, Containers: map[string]*ContainerUsage{"c": {Name: "c", MemoryWorkingSet: &mem, RootfsBytes: rootfs, LogsBytes: logs}}}
}

// The kubelet's ranking: usage above requests first, then lower priority,
// then the larger consumption above request; pods without figures first.
func TestRankPods(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name        string
		signal      string
		withImageFs bool
		pods        []*corev1.Pod
		usage       map[string]*PodUsage
		want        []string
	}{
		{"memory: over request before priority", SignalMemoryAvailable, false,
			[]*corev1.Pod{rankTestPod("guaranteed-low", 0, "64Mi", ""), rankTestPod("besteffort-high", 1000, "", "")},
			map[string]*PodUsage{"guaranteed-low": usageOf(10*mi, 0, 0, 0), "besteffort-high": usageOf(1*mi, 0, 0, 0)},
			[]string{"besteffort-high", "guaranteed-low"}},
		{"memory: then priority", SignalMemoryAvailable, false,
			[]*corev1.Pod{rankTestPod("high", 1000, "", ""), rankTestPod("low", 10, "", "")},
			map[string]*PodUsage{"high": usageOf(500*mi, 0, 0, 0), "low": usageOf(1*mi, 0, 0, 0)},
			[]string{"low", "high"}},
		{"memory: then usage above request", SignalMemoryAvailable, false,
			[]*corev1.Pod{rankTestPod("small", 0, "10Mi", ""), rankTestPod("big", 0, "100Mi", ""), rankTestPod("nostats", 0, "", "")},
			map[string]*PodUsage{"small": usageOf(30*mi, 0, 0, 0), "big": usageOf(200*mi, 0, 0, 0)},
			[]string{"nostats", "big", "small"}},
		{"disk: all filesystems without an imagefs", SignalNodeFsAvailable, false,
			[]*corev1.Pod{rankTestPod("logs", 0, "", "1Gi"), rankTestPod("rootfs", 0, "", "")},
			map[string]*PodUsage{"logs": usageOf(0, 0, 100*mi, 0), "rootfs": usageOf(0, 50*mi, 0, 0)},
			[]string{"rootfs", "logs"}},
		{"disk: nodefs with an imagefs counts logs, not rootfs", SignalNodeFsAvailable, true,
			[]*corev1.Pod{rankTestPod("rootfs", 0, "", ""), rankTestPod("logs", 0, "", "")},
			map[string]*PodUsage{"logs": usageOf(0, 0, 10*mi, 0), "rootfs": usageOf(0, 500*mi, 0, 0)},
			[]string{"logs", "rootfs"}},
		{"pids: priority, then processes", SignalPIDAvailable, false,
			[]*corev1.Pod{rankTestPod("few", 0, "", ""), rankTestPod("many", 0, "", ""), rankTestPod("important", 100, "", "")},
			map[string]*PodUsage{"few": usageOf(0, 0, 0, 2), "many": usageOf(0, 0, 0, 200), "important": usageOf(0, 0, 0, 900)},
			[]string{"many", "few", "important"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rankPods(tc.signal, tc.withImageFs, tc.pods, tc.usage)
			var got []string
			for _, p := range tc.pods {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseThresholds(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hard        map[string]string
		soft        map[string]string
		grace       map[string]string
		errContains string
		want        int
	}{
		{"defaults", config.Defaults().GC.EvictionHard, nil, nil, "", 4},
		{"soft with grace", nil, map[string]string{SignalMemoryAvailable: "1Gi"}, map[string]string{SignalMemoryAvailable: "1m"}, "", 1},
		{"soft without grace", nil, map[string]string{SignalMemoryAvailable: "1Gi"}, nil, "gc.evictionSoftGracePeriod", 0},
		{"unknown signal", map[string]string{"cpu.available": "1"}, nil, nil, `unknown signal "cpu.available"`, 0},
		{"bad value", map[string]string{SignalNodeFsAvailable: "lots"}, nil, nil, "nodefs.available", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := parseThresholds(config.GCConfig{EvictionHard: tc.hard, EvictionSoft: tc.soft, EvictionSoftGracePeriod: tc.grace})
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) {
					t.Fatalf("err = %v, want containing %q", err, tc.errContains)
				}
				return
			}
			if err != nil || len(ts) != tc.want {
				t.Fatalf("thresholds %v, %v; want %d", ts, err, tc.want)
			}
		})
	}
}

// Percentages are of the signal's capacity; met means available < value.
func TestThresholdsMet(t *testing.T) {
	ts, err := parseThresholds(config.GCConfig{EvictionHard: map[string]string{SignalNodeFsAvailable: "10%", SignalMemoryAvailable: "100Mi"}})
	if err != nil {
		t.Fatal(err)
	}
	obs := makeObservations(&NodeStats{MemoryCapacity: 1 << 30, MemoryWorkingSet: 1<<30 - 100<<20,
		NodeFs: &FsStats{Capacity: 1000, Available: 99, Inodes: 10, InodesFree: 1}})
	met := thresholdsMet(ts, obs)
	if len(met) != 1 || met[0].Signal != SignalNodeFsAvailable {
		t.Errorf("met %v, want nodefs only (99 < 10%% of 1000; memory 100Mi is not < 100Mi)", met)
	}
}

func TestKeysAndNames(t *testing.T) {
	if got := ImageRecordKey("sha256:0123abc"); got != "sha256_0123abc" {
		t.Errorf("ImageRecordKey = %q", got)
	}
	if got := ImageRecordKey("docker.io/library/x@sha256:ab"); got != "docker.io/library/x_sha256_ab" {
		t.Errorf("ImageRecordKey = %q", got)
	}
	if got := podUIDFromLogDir("kube-system_my_pod_1234-abcd"); got != "1234-abcd" {
		t.Errorf("podUIDFromLogDir = %q", got)
	}
}
