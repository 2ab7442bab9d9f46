package runtime

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// Every volume of a pod is measured as the kubelet's volume stats
// calculator does and published for /stats/summary: an emptyDir on disk
// and one in memory, a downwardAPI volume by du and statfs (the bytes and
// inodes the container wrote, the filesystem's capacity), the local
// ephemeral ones (the emptyDir on disk) first; a hostPath volume has no
// stats. What the emptyDir on disk and /etc/hosts use is the pod's
// ephemeral volume usage. Before, only persistent volumes were measured:
// an emptyDir never appeared.
func TestVolumeStatsOfEveryVolume(t *testing.T) {
	h := newHarness(t, harnessOptions{options: func(o *Options) { o.VolumeStatsPeriod = 500 * time.Millisecond }})
	app := busybox("app", "dd if=/dev/zero of=/cache/blob bs=1M count=3 && mkdir /cache/d && touch /cache/d/a /cache/d/b && "+
		"dd if=/dev/zero of=/mem/blob bs=1M count=2 && echo done > /tmp/ready && exec sleep 3600")
	for _, m := range [][2]string{{"cache", "/cache"}, {"mem", "/mem"}, {"info", "/info"}, {"host", "/host"}} {
		app = withMount(app, m[0], m[1])
	}
	pod := newPod("measured", app)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}}},
	}
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	waitFor(t, time.Minute, "the container wrote its files", func() (bool, string) {
		out, _ := h.execIn(o, "app", true, "cat", "/tmp/ready")
		return out == "done\n", out
	})
	var got []statsapi.VolumeStats
	var eph statsapi.FsStats
	waitFor(t, 30*time.Second, "the volumes measured", func() (bool, string) {
		rec, _, err := bus.Get[schemas.PodVolumeStats](h.ctx, h.status, bus.BucketRuntime, bus.KeyVolumeStats)
		if err != nil || rec == nil {
			return false, fmt.Sprint(err)
		}
		got, eph = rec.Pods[string(pod.UID)], rec.Ephemeral[string(pod.UID)]
		return len(got) == 3 && *got[0].UsedBytes >= 3<<20 && *got[2].UsedBytes >= 2<<20, fmt.Sprintf("%+v", got)
	})
	for i, name := range []string{"cache", "info", "mem"} {
		v := got[i]
		if v.Name != name || v.PVCRef != nil || v.CapacityBytes == nil || *v.CapacityBytes == 0 || v.AvailableBytes == nil ||
			v.Inodes == nil || v.InodesFree == nil || v.InodesUsed == nil || *v.InodesUsed == 0 {
			t.Fatalf("volume %d: %+v, want %s", i, v, name)
		}
	}
	if cache := got[0]; *cache.UsedBytes > 4<<20 || *cache.InodesUsed != 5 {
		t.Errorf("cache: %d bytes, %d inodes; want 3 MiB and 5 (the directory, blob, d, a, b)", *cache.UsedBytes, *cache.InodesUsed)
	}
	hosts, err := os.Stat(podDir(h.cfg.Node.StateDir, string(pod.UID)) + "/etc-hosts")
	if err != nil {
		t.Fatal(err)
	}
	if eph.UsedBytes == nil || *eph.UsedBytes < *got[0].UsedBytes+uint64(hosts.Size()) || *eph.UsedBytes > *got[0].UsedBytes+8192 ||
		eph.InodesUsed == nil || *eph.InodesUsed != 6 {
		t.Errorf("ephemeral use %+v, want the emptyDir on disk and /etc/hosts (%d + %d bytes, 6 inodes)", eph, *got[0].UsedBytes, hosts.Size())
	}
}
