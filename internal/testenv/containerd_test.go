package testenv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

func criCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// runPod starts a sandbox and one busybox container in it, and returns the
// sandbox ID, container ID and the sandbox's IP.
func runPod(t *testing.T, cri *testenv.CRI, name string, args ...string) (sandboxID, containerID, ip string) {
	t.Helper()
	return runPodWith(t, cri, name, nil, args...)
}

// runPodWith is runPod with the container's config changed by mutate.
func runPodWith(t *testing.T, cri *testenv.CRI, name string, mutate func(*runtimeapi.ContainerConfig), args ...string) (sandboxID, containerID, ip string) {
	t.Helper()
	ctx := criCtx(t)
	uid := fmt.Sprintf("uid-%s-%d", name, time.Now().UnixNano())
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		Hostname: name,
		// The container log lands under the test's temp dir.
		LogDirectory: t.TempDir(),
		Labels: map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": "default",
			"io.kubernetes.pod.uid":       uid,
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
	began := time.Now()
	sb, err := cri.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbConfig})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	sandboxStart := time.Since(began)
	st, err := cri.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox state = %v, want ready", st.Status.State)
	}
	ip = st.GetStatus().GetNetwork().GetIp()

	began = time.Now()
	cc := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: images.BusyboxImage},
		Command:  args[:1],
		Args:     args[1:],
		LogPath:  "main.log",
		Labels: map[string]string{
			"io.kubernetes.container.name": "main",
			"io.kubernetes.pod.uid":        uid,
		},
	}
	if mutate != nil {
		mutate(cc)
	}
	ctr, err := cri.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId, Config: cc, SandboxConfig: sbConfig,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := cri.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	t.Logf("RunPodSandbox took %v; CreateContainer+StartContainer took %v", sandboxStart, time.Since(began))
	return sb.PodSandboxId, ctr.ContainerId, ip
}

// containerPID asks CRI (verbose status) for the container's init pid.
func containerPID(t *testing.T, cri *testenv.CRI, id string) int {
	t.Helper()
	st, err := cri.Runtime.ContainerStatus(criCtx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("no pid in verbose ContainerStatus (%v): %q", err, st.Info["info"])
	}
	return info.Pid
}

func TestContainerdPodServesHTTP(t *testing.T) {
	c := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	t.Logf("containerd slot %d (bridge %s, subnet %s) ready in %v", c.Slot, c.BridgeName, c.Subnet, c.StartTime)
	cri := c.RuntimeClient(t)
	ctx := criCtx(t)

	// The local images are there, under the IDs they were built with.
	for _, img := range c.Images {
		st, err := cri.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: img.Ref}})
		if err != nil {
			t.Fatalf("ImageStatus %s: %v", img.Ref, err)
		}
		if st.Image == nil || st.Image.Id != img.ID.String() {
			t.Fatalf("ImageStatus %s = %v, want ID %s", img.Ref, st.Image, img.ID)
		}
	}

	sandboxID, containerID, ip := runPod(t, cri, "web", "httpd", "-f", "-p", "8080", "-h", "/www")
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatalf("sandbox IP %q: %v", ip, err)
	}
	if !netip.MustParsePrefix(c.Subnet).Contains(addr) {
		t.Fatalf("sandbox IP %s is not in the instance's subnet %s", addr, c.Subnet)
	}

	// From the host (this process) to the pod, across the bridge.
	url := "http://" + net.JoinHostPort(ip, "8080") + "/"
	client := &http.Client{Timeout: 2 * time.Second}
	var body string
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if resp.StatusCode == http.StatusOK {
				break
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if body != images.IndexHTML {
		t.Fatalf("GET %s = %q, want %q", url, body, images.IndexHTML)
	}

	// Stop and remove; the lease and the network namespace go with the sandbox.
	if _, err := cri.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: 5}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := cri.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sandboxID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	list, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("ListPodSandbox after removal = %v, %v; want none", list, err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "ipam", c.NetworkName, ip)); !os.IsNotExist(err) {
		t.Errorf("host-local still holds a lease for %s (%v)", ip, err)
	}
	if m := testenv.MountsUnder(c.Dir); len(m) != 0 {
		t.Errorf("mounts left under %s after removing the pod: %q", c.Dir, m)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "8080"), 300*time.Millisecond); err == nil {
		conn.Close()
		t.Errorf("%s:8080 still answers after the pod was removed", ip)
	}
}

func TestContainerdStopCleansUp(t *testing.T) {
	testenv.RequiresRoot(t)
	// Two instances at once get their own slot, bridge and subnet.
	other := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	c, err := testenv.StartContainerd(testenv.ContainerdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	t.Logf("containerd slot %d ready in %v (beside slot %d)", c.Slot, c.StartTime, other.Slot)
	if c.Slot == other.Slot || c.BridgeName == other.BridgeName || c.Subnet == other.Subnet || c.Address == other.Address {
		t.Fatalf("two instances share a slot: %+v and %+v", c, other)
	}

	cri := c.RuntimeClient(t)
	_, containerID, _ := runPod(t, cri, "sleeper", "sleep", "3600")
	pid := containerPID(t, cri, containerID)
	shims := testenv.ShimPIDs(c.Address)
	if len(shims) == 0 {
		t.Fatalf("no shim found for %s", c.Address)
	}
	if len(testenv.MountsUnder(c.Dir)) == 0 {
		t.Fatalf("no mounts under %s while a pod runs", c.Dir)
	}

	// Stop with the pod still running: Stop must take it all down.
	c.Stop()
	if left := testenv.ShimPIDs(c.Address); len(left) != 0 {
		t.Errorf("shims left: %v", left)
	}
	for _, s := range shims {
		if syscall.Kill(s, 0) == nil && isAlive(s) {
			t.Errorf("shim %d still alive", s)
		}
	}
	if isAlive(pid) {
		t.Errorf("container process %d still alive", pid)
	}
	for _, dir := range []string{c.Dir, c.Root} {
		if m := testenv.MountsUnder(dir); len(m) != 0 {
			t.Errorf("mounts left under %s: %q", dir, m)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still exists (%v)", dir, err)
		}
	}
	if out, err := exec.Command("ip", "link", "show", c.BridgeName).CombinedOutput(); err == nil {
		t.Errorf("bridge %s still exists: %s", c.BridgeName, out)
	}
	// The slot is free again.
	f, err := os.OpenFile(filepath.Join(testenv.DefaultSlotDir, fmt.Sprintf("slot-%d.lock", c.Slot)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("slot %d is still locked after Stop: %v", c.Slot, err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)

	// The other instance is untouched.
	if _, err := other.RuntimeClient(t).Runtime.Version(criCtx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("the other instance stopped answering: %v", err)
	}
}

// TestContainerdStopAfterCrash kills containerd under a running pod, as a
// crash would, and checks that Stop still takes down the pod, its shims and
// mounts: what a crashed holder of a slot leaves, the next one removes the
// same way.
func TestContainerdStopAfterCrash(t *testing.T) {
	testenv.RequiresRoot(t)
	c, err := testenv.StartContainerd(testenv.ContainerdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cri := c.RuntimeClient(t)
	sandboxID, containerID, _ := runPod(t, cri, "orphan", "sleep", "3600")
	pid := containerPID(t, cri, containerID)
	shims := testenv.ShimPIDs(c.Address)
	if len(shims) == 0 {
		t.Fatalf("no shim found for %s", c.Address)
	}
	if err := syscall.Kill(c.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); isAlive(c.Pid()); {
		if time.Now().After(deadline) {
			t.Fatal("containerd survived SIGKILL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !isAlive(pid) {
		t.Fatalf("the container died with containerd; the test proves nothing")
	}

	c.Stop()
	for _, p := range append(shims, pid) {
		if isAlive(p) {
			t.Errorf("process %d (shim or container) survived Stop", p)
		}
	}
	for _, dir := range []string{c.Dir, c.Root} {
		if m := testenv.MountsUnder(dir); len(m) != 0 {
			t.Errorf("mounts left under %s: %q", dir, m)
		}
	}
	for _, id := range []string{sandboxID, containerID} {
		if _, err := os.Stat(filepath.Join("/run/containerd/runc/k8s.io", id)); !os.IsNotExist(err) {
			t.Errorf("runc state of %s left behind (%v)", id, err)
		}
	}
	if out, err := exec.Command("ip", "link", "show", c.BridgeName).CombinedOutput(); err == nil {
		t.Errorf("bridge %s still exists: %s", c.BridgeName, out)
	}
	// CNI DEL never ran: its masquerade rules and cache are removed by Stop.
	nat, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Fatal(err)
	}
	if tag := fmt.Sprintf(`name: \"%s\"`, c.NetworkName); strings.Contains(string(nat), tag) {
		t.Errorf("nat rules of %s left:\n%s", c.NetworkName, nat)
	}
	if left, _ := filepath.Glob("/var/lib/cni/results/" + c.NetworkName + "-*"); len(left) != 0 {
		t.Errorf("CNI cache left: %q", left)
	}
}

// isAlive reports whether pid exists and is not a zombie.
func isAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ')' {
			return i+2 < len(s) && s[i+2] != 'Z'
		}
	}
	return true
}
