package faults_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// Image GC and eviction thresholds of TestImageFilesystemFull. The
// kubelet's defaults put the image GC high threshold (85 % used) and the
// imagefs.available hard eviction threshold (15 % available) on the same
// line, so that neither can be seen alone; the test lowers image GC to
// 70/60 and keeps the eviction threshold at its default.
const (
	imageFsGCHigh = 70
	imageFsGCLow  = 60
	// imageFsEvictAt is gc.evictionHard imagefs.available's default.
	imageFsEvictAt = 15
	// imageFsHogLeaves is what the hog pod leaves free of the image
	// filesystem, in percent: below imageFsEvictAt.
	imageFsHogLeaves = 7
)

// TestImageFilesystemFull (issue 37, the image filesystem full): a
// containerd of its own whose root (the image filesystem) is a 320 MiB ext4
// on a loop device, a cluster node on it.
//
//  1. Images are imported until the filesystem crosses the image GC high
//     threshold: nodelet-gc removes unused images until it is below the low
//     one; the images of running pods stay, and so do some unused ones (it
//     stops at the low threshold).
//  2. A pod fills the filesystem through its writable layer (the imagefs
//     holds the writable layers) and keeps it full: the node reports
//     DiskPressure (condition and NodeHasDiskPressure event), image GC
//     reports FreeDiskSpaceFailed, the eviction manager reclaims node-level
//     resources first (every unused image goes) and then evicts the pod
//     that uses the most beyond its request, with the kubelet's reason and
//     message; the pods with an ephemeral-storage request they stay within
//     are not touched. A pod created meanwhile is refused at admission
//     (Evicted, "The node had condition: [DiskPressure]. ").
//  3. The evicted pod's dead container is removed, space returns, the
//     condition clears after evictionPressureTransitionPeriod and a new pod
//     runs. No daemon restarted; the bus's store (on the root filesystem)
//     was never touched by the full one.
func TestImageFilesystemFull(t *testing.T) {
	began := time.Now()
	root := loopFilesystem(t, 320)
	c := testenv.NewContainerd(t, testenv.ContainerdOptions{RootDir: root, StatsCollectPeriod: 1})
	cri := c.RuntimeClient(t)
	mnt := root // statfs of any path on it
	n := e2e.NewNode(t, e2e.NodeOptions{API: true, Containerd: c, GC: fmt.Sprintf(`  imageGCPeriod: 1s
  imageMinimumGCAge: 0s
  imageGCHighThresholdPercent: %d
  imageGCLowThresholdPercent: %d
  evictionMonitoringPeriod: 2s
  evictionPressureTransitionPeriod: 5s
`, imageFsGCHigh, imageFsGCLow)})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	capacity, _ := fsFigures(t, mnt)
	t.Logf("image filesystem: %.1f MiB, %d%% used with pause and busybox; node ready %v after start",
		float64(capacity)/(1<<20), fsUsage(t, mnt), time.Since(began).Round(100*time.Millisecond))

	// Filler images: busybox and a layer of random bytes, 4 % of the
	// filesystem each (8 % on disk: the layer's blob and its unpacked
	// snapshot).
	busybox := c.Images[1]
	if busybox.Ref != images.BusyboxImage {
		t.Fatalf("images = %+v, want pause then busybox", c.Images)
	}
	tarDir := t.TempDir()
	layerSize := capacity * 4 / 100
	filler := func(i int) (ref, id string) {
		ref = fmt.Sprintf("nodelet.local/e2e-filler-%d:1", i)
		tb := fillerImage(t, busybox, ref, layerSize, uint64(i), filepath.Join(tarDir, fmt.Sprintf("filler-%d.tar", i)))
		if err := images.Import(ctx, c.Address, "k8s.io", tb.Path); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(tb.Path)
		return ref, tb.ID.String()
	}

	// Two pods run filler images, within an ephemeral-storage request.
	keep := map[string]string{} // pod name → image ID
	var keepImage string
	for i := 1; i <= 2; i++ {
		ref, id := filler(i)
		if i == 1 {
			keepImage = ref
		}
		p := e2e.APIPod(nodeName, ns, fmt.Sprintf("keep-%d", i), "")
		p.Spec.Containers[0].Image = ref
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("16Mi")}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		keep[p.Name] = id
	}
	eventually.True(t, 60*time.Second, "the keep pods Running", func() bool {
		for name := range keep {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil || !e2e.PodReady(p) {
				return false
			}
		}
		return true
	})
	keepContainers := map[string]string{} // pod name → container ID
	for name := range keep {
		p, _ := pods.Get(ctx, name, metav1.GetOptions{})
		keepContainers[name] = p.Status.ContainerStatuses[0].ContainerID
	}

	// 1. Image GC: unused images until the high threshold is crossed.
	unused := map[string]string{} // image ID → ref
	crossed := time.Time{}
	var peak int
	for i := 3; i < 20; i++ {
		ref, id := filler(i)
		unused[id] = ref
		if peak = fsUsage(t, mnt); peak >= imageFsGCHigh {
			crossed = time.Now()
			break
		}
	}
	if crossed.IsZero() {
		t.Fatalf("the image filesystem never reached %d%%", imageFsGCHigh)
	}
	t.Logf("%d unused images imported, the image filesystem at %d%%", len(unused), peak)
	eventually.True(t, 30*time.Second, fmt.Sprintf("image GC below the low threshold (%d%%)", imageFsGCLow), func() bool {
		return fsUsage(t, mnt) < imageFsGCLow
	})
	gcTook := time.Since(crossed)
	have := criImageIDs(t, cri)
	for name, id := range keep {
		if !have[id] {
			t.Errorf("image GC removed %s, the image of running pod %s", id, name)
		}
	}
	// The sandbox image is never collected; busybox, which no container
	// uses (the fillers only share its layer), is fair game.
	if pause := c.Images[0]; !have[pause.ID.String()] {
		t.Errorf("image GC removed the sandbox image %s", pause.Ref)
	}
	var removed, left int
	for id := range unused {
		if have[id] {
			left++
		} else {
			removed++
		}
	}
	if removed == 0 || left == 0 {
		t.Errorf("image GC removed %d of %d unused images, want some (down to the low threshold, not all)", removed, len(unused))
	}
	t.Logf("image GC: %d of %d unused images removed, %d%% used, %v after the high threshold was crossed",
		removed, len(unused), fsUsage(t, mnt), gcTook.Round(10*time.Millisecond))

	// 2. A pod fills the image filesystem through its writable layer and
	// keeps it full.
	// Every pod from here on runs the image of keep-1 (busybox itself
	// may have gone).
	inUse := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Containers[0].Image = keepImage
		return p
	}
	hog := inUse(e2e.APIPod(nodeName, ns, "hog", ""))
	hog.Spec.Containers[0].Command = []string{"sh", "-c", fmt.Sprintf(`trap 'exit 0' TERM
i=0
while true; do
  set -- $(stat -f -c '%%a %%b %%S' /)
  want=$(( $2 * %d / 100 ))
  if [ "$1" -gt "$want" ]; then
    i=$((i+1))
    fallocate -l $(( ($1 - want) * $3 )) /fill.$i || true
  fi
  sleep 0.2
done`, imageFsHogLeaves)}
	hog.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	hogCreated := time.Now()
	if _, err := pods.Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	diskPressure := func(want corev1.ConditionStatus) func() bool {
		return func() bool {
			node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeDiskPressure {
					return cond.Status == want
				}
			}
			return false
		}
	}
	eventually.True(t, 60*time.Second, "the Node's DiskPressure condition True", diskPressure(corev1.ConditionTrue))
	pressureAt := time.Since(hogCreated)
	// Under DiskPressure every pod but a critical one is refused.
	if _, err := pods.Create(ctx, inUse(e2e.APIPod(nodeName, ns, "latecomer", "")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var evicted *corev1.Pod
	eventually.True(t, 60*time.Second, "the hog evicted", func() bool {
		p, err := pods.Get(ctx, "hog", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodFailed {
			evicted = p
			return true
		}
		return false
	})
	evictedAt := time.Since(hogCreated)
	if evicted.Status.Reason != "Evicted" ||
		!strings.HasPrefix(evicted.Status.Message, "The node was low on resource: ephemeral-storage. Threshold quantity: ") ||
		!strings.Contains(evicted.Status.Message, "Container app was using ") ||
		!strings.HasSuffix(evicted.Status.Message, ", request is 0, has larger consumption of ephemeral-storage. ") {
		t.Errorf("hog: reason %q, message %q; want the kubelet's eviction for ephemeral-storage", evicted.Status.Reason, evicted.Status.Message)
	}
	eventually.True(t, 30*time.Second, "the latecomer refused with the kubelet's reason", func() bool {
		p, err := pods.Get(ctx, "latecomer", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" &&
			p.Status.Message == "Pod was rejected: The node had condition: [DiskPressure]. "
	})

	// 3. Recovery.
	eventually.True(t, 60*time.Second, "the Node's DiskPressure condition False again", diskPressure(corev1.ConditionFalse))
	recoveredAt := time.Since(hogCreated)
	if u := fsUsage(t, mnt); u >= 100-imageFsEvictAt {
		t.Errorf("DiskPressure cleared with the image filesystem %d%% used", u)
	}
	have = criImageIDs(t, cri)
	for id, ref := range unused {
		if have[id] {
			t.Errorf("unused image %s survived the eviction manager's reclaim", ref)
		}
	}
	if _, err := pods.Create(ctx, inUse(e2e.APIPod(nodeName, ns, "after", "")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "a new pod Running after recovery", func() bool {
		p, err := pods.Get(ctx, "after", metav1.GetOptions{})
		return err == nil && e2e.PodReady(p)
	})
	for name, cid := range keepContainers {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || !e2e.PodReady(p) || p.Status.ContainerStatuses[0].ContainerID != cid || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s: not the same running container after the pressure: %+v, %v", name, p.Status.ContainerStatuses, err)
		}
	}
	for _, reason := range []string{"NodeHasDiskPressure", "NodeHasNoDiskPressure", "EvictionThresholdMet", "FreeDiskSpaceFailed", "ImageGCFailed"} {
		if ev := nodeEventSince(ctx, t, admin, reason, began); ev == nil {
			t.Errorf("no %s node event", reason)
		} else if reason == "FreeDiskSpaceFailed" && !strings.HasPrefix(ev.Message, "Insufficient free disk space on the node's image filesystem (") {
			t.Errorf("FreeDiskSpaceFailed: %q", ev.Message)
		}
	}
	if ev := podEventSince(ctx, t, admin, ns, "hog", "Evicted", began); ev == nil || ev.Message != evicted.Status.Message {
		t.Errorf("Evicted event of the hog = %+v, want the status's message", ev)
	}
	st, err := supervisor.ReadState(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != "ready" || s.Restarts != 0 {
			t.Errorf("%s: %s after %d restarts, want ready and never restarted", s.Name, s.State, s.Restarts)
		}
	}
	t.Logf("image filesystem full: image GC below %d%% %v after %d%% was crossed; DiskPressure on the Node %v after the hog started, hog evicted after %v, DiskPressure False after %v (transition period 5s); whole test %v",
		imageFsGCLow, gcTook.Round(10*time.Millisecond), imageFsGCHigh, pressureAt.Round(10*time.Millisecond), evictedAt.Round(10*time.Millisecond),
		recoveredAt.Round(10*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
}

// loopFilesystem makes an ext4 of sizeMiB in a file, mounts it on a loop
// device and returns the mount point; the cleanup unmounts it (releasing
// the loop device) after everything registered later, e.g. the containerd
// on it, has stopped.
func loopFilesystem(t *testing.T, sizeMiB int64) string {
	t.Helper()
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "imagefs.ext4"), filepath.Join(dir, "mnt")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sizeMiB << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// -m 0: no blocks reserved for root, so that statfs's available is
	// what containerd (root) can write.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -o loop %s: %v\n%s", img, err, out)
	}
	t.Cleanup(func() {
		// mount -o loop set autoclear: the loop device goes with the mount.
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
			_ = exec.Command("umount", "-l", mnt).Run()
		}
	})
	return mnt
}

// fsFigures are the capacity and available bytes of path's filesystem.
func fsFigures(t *testing.T, path string) (capacity, available int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize
}

// fsUsage is the filesystem's use in percent, as image GC computes it.
func fsUsage(t *testing.T, path string) int {
	c, a := fsFigures(t, path)
	return 100 - int(a*100/c)
}

// fillerImage writes base with one more layer: /filler holding size random
// bytes from seed (so that no two fillers share a layer), stored
// uncompressed-in-gzip so that the blob is as big as the layer.
func fillerImage(t *testing.T, base images.Tarball, ref string, size int64, seed uint64, out string) images.Tarball {
	t.Helper()
	baseTag, err := name.NewTag(base.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(base.Path, &baseTag)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "filler", Mode: 0o644, Size: size, ModTime: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, rand.NewChaCha8(seedBytes(seed)), size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := images.Write(img, ref, out)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func seedBytes(seed uint64) (s [32]byte) {
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return s
}

// criImageIDs are the IDs of the images the containerd has.
func criImageIDs(t *testing.T, cri *testenv.CRI) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cri.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, img := range resp.Images {
		out[img.Id] = true
	}
	return out
}

// nodeEventSince is the latest event with reason about the node, seen
// since the given time, or nil.
func nodeEventSince(ctx context.Context, t *testing.T, c kubernetes.Interface, reason string, since time.Time) *corev1.Event {
	return eventSince(ctx, t, c, metav1.NamespaceDefault, "Node", nodeName, reason, since)
}

func podEventSince(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, pod, reason string, since time.Time) *corev1.Event {
	return eventSince(ctx, t, c, ns, "Pod", pod, reason, since)
}

func eventSince(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, kind, name, reason string, since time.Time) *corev1.Event {
	t.Helper()
	l, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out *corev1.Event
	for i := range l.Items {
		ev := &l.Items[i]
		last := ev.LastTimestamp.Time
		if last.IsZero() {
			last = ev.EventTime.Time
		}
		// Timestamps have second precision.
		if ev.InvolvedObject.Kind == kind && !last.Before(since.Truncate(time.Second)) && (out == nil || !last.Before(out.LastTimestamp.Time)) {
			out = ev
		}
	}
	return out
}
