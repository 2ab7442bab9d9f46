package composerun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

const (
	// Debian's docker.io: the engine and its CLI (20.10). The CLI of the
	// package, not whatever docker comes first in PATH: a newer CLI builds
	// with BuildKit only through the buildx plugin, which Debian 12 lacks.
	dockerd   = "/usr/sbin/dockerd"
	dockerCLI = "/usr/bin/docker"
	// pluginDir is where requireDocker installs the compose plugin
	// (scripts/compose.sh) and Debian's CLI looks for it.
	pluginDir = "/usr/libexec/docker/cli-plugins"

	// image is what docker-compose.yml runs; baseImage the Debian 12 root
	// it is built on here, imported from the debootstrap root the
	// systemd-nspawn tests use (testenv.NspawnRoot).
	image      = "nodelet.local/nodelet:dev"
	baseImage  = "nodelet.local/debian-nspawn-root:bookworm"
	baseRecipe = "org.nodelet.base=" + "nspawn-debian12"

	// cgroupRoot is the run's runtime.cgroupRoot (without the slash).
	cgroupRoot = "nodelet-compose"

	// testRoot holds each run's scratch tree (short: sockets live there).
	testRoot = "/var/lib/nodelet-compose-test"
)

// hostPaths are the host paths docker-compose.yml and the node's containerd
// use; the test's mount namespace binds each to <run>/root<path>, so that
// the file runs unchanged without touching the machine's own.
var hostPaths = []string{
	"/etc/nodelet",     // the manifests, containerd's config, the CNI conflist
	"/var/lib/nodelet", // nodelet's state, containerd's root
	"/run/nodelet",     // containerd's state and socket
	"/var/log/pods",    // pod logs
	"/var/lib/kubelet", // device plugins, plugin registry
	"/var/lib/cni",     // host-local IPAM leases
	"/run/containerd",  // runc's state; hides a system containerd from dockerd
	"/opt",             // /opt/cni/bin, which compose mounts
	"/etc/docker",      // dockerd's trust key
}

// requireDocker skips the test, loudly, only where Debian's engine cannot
// be installed; the compose plugin is built when missing.
func requireDocker(t *testing.T) {
	t.Helper()
	testenv.RequiresRoot(t)
	missing := !exists(dockerd) || !exists(dockerCLI)
	if missing {
		out, err := exec.Command("bash", "-c", installDockerScript).CombinedOutput()
		if err != nil || !exists(dockerd) || !exists(dockerCLI) {
			t.Skipf("SKIPPED: docker-compose.yml was NOT run: Debian's docker.io (dockerd, docker) could not be installed: %v\n%s", err, out)
		}
	}
	if !exists(filepath.Join(pluginDir, "docker-compose")) {
		root := repoRoot(t)
		out, err := exec.Command(filepath.Join(root, "scripts", "compose.sh"), "install", pluginDir).CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/compose.sh install %s: %v\n%s", pluginDir, err, out)
		}
	}
}

// installDockerScript installs the engine as docs/install.md says: the
// daemon's config first (no iptables rules, no bridge: the FORWARD policy
// stays ACCEPT), then the package.
const installDockerScript = `set -e
mkdir -p /etc/docker
[ -e /etc/docker/daemon.json ] || echo '{"iptables": false, "ip6tables": false, "bridge": "none"}' >/etc/docker/daemon.json
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends docker.io || { apt-get update -qq && apt-get install -y -qq --no-install-recommends docker.io; }`

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func cacheDir() string {
	if d := os.Getenv("NODELET_CACHE"); d != "" {
		return d
	}
	home := os.Getenv("HOME")
	if home == "" {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "nodelet")
}

// TestComposeQuickLook brings a node up with docker-compose.yml as README's
// quick look says, from a copy of the repository's files: the image built
// from deploy/Dockerfile, `docker compose up -d --wait`, a static pod
// dropped into the manifest dir running in the node's containerd, `docker
// compose restart runtime` leaving the pod's container as it was (the same
// container, never restarted), then the pod deleted and `docker compose
// down`, after which no container, network, volume, mount, sandbox or
// process of the run is left.
func TestComposeQuickLook(t *testing.T) {
	requireDocker(t)
	began := time.Now()
	root := repoRoot(t)

	// One run at a time: the engine's data dir (images, build cache) is
	// shared by the runs, so that a second run builds nothing.
	dataRoot := filepath.Join(cacheDir(), "compose-docker")
	if err := os.MkdirAll(dataRoot, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(dataRoot+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	// The host's FORWARD policy (other tests' rules come and go).
	forwardBefore := forwardPolicy(t)
	hostMountsBefore := hostMounts(t)

	// The binaries first (the slow part when the build cache is cold), on
	// the host as scripts/setup.sh builds them (go build, cgo as the host
	// has it: the image's base is the host's Debian 12, so the libc
	// matches, and the build cache is the one setup.sh and the other tests
	// fill).
	bin := t.TempDir()
	if err := testenv.BuildBinaries(bin); err != nil {
		t.Fatal(err)
	}
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), what) }
	phase("binaries built")

	n := startNode(t, dataRoot)
	phase("engine and containerd up in the test's namespaces")

	// A clean copy of the repository's files, the binaries in its
	// bin/image/ (what BINARIES=prebuilt takes).
	src := filepath.Join(n.dir, "repo")
	copyRepo(t, root, src)
	entries, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := copyFile(filepath.Join(bin, e.Name()), filepath.Join(src, "bin", "image", e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	// The copy's config is the node's, as an operator edits it; only the
	// cgroup root differs from the file's, so that the run's pod cgroups
	// never meet those of a node of the machine (cgroups are not namespaced).
	editConfig(t, filepath.Join(src, "deploy", "nodelet.yaml"), "cgroupRoot: /nodelet ", "cgroupRoot: /"+cgroupRoot+" ")
	if ls, err := os.ReadDir(filepath.Join(src, "bin", "image")); err != nil || len(ls) < 2 {
		t.Fatalf("bin/ of the copy: %v, %d entries (built: %d)", err, len(ls), len(entries))
	}
	phase("repository copied")

	n.baseImage(t)
	phase("base image present")
	n.docker(t, []string{"DOCKER_BUILDKIT=1"}, "build", "-q", "-f", filepath.Join(src, "deploy", "Dockerfile"),
		"--build-arg", "BINARIES=prebuilt", "--build-arg", "BASE_IMAGE="+baseImage, "-t", image, src)
	phase("image built")

	compose := func(args ...string) string {
		t.Helper()
		return n.docker(t, nil, append([]string{"compose", "--project-directory", src, "-f", filepath.Join(src, "docker-compose.yml")}, args...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range []string{"bus", "sources", "admission", "runtime", "status"} {
				out, _ := n.dockerOut(nil, "compose", "--project-directory", src, "logs", "--tail", "30", s)
				t.Logf("compose logs %s:\n%s", s, out)
			}
		}
		_, _ = n.dockerOut(nil, "compose", "--project-directory", src, "down", "--timeout", "10")
	})
	networksBefore := n.docker(t, nil, "network", "ls", "-q")
	mountsBefore := n.mounts(t)
	volumesBefore := n.docker(t, nil, "volume", "ls", "-q")

	compose("up", "-d", "--wait", "--no-build")
	phase("compose up: every service healthy")

	cri := n.cri(t)
	ctx := t.Context()
	manifest := filepath.Join(n.path("/etc/nodelet/manifests"), "quick.yaml")
	if err := os.WriteFile(manifest, []byte(staticPod), 0o644); err != nil {
		t.Fatal(err)
	}
	var ctrID, sandboxID string
	eventually.State(t, 90*time.Second, "the static pod's container running", func() (bool, string) {
		cs, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"io.kubernetes.container.name": "sleep"},
		}})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range cs.Containers {
			if strings.HasPrefix(c.Labels["io.kubernetes.pod.name"], "quick-") && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				ctrID, sandboxID = c.Id, c.PodSandboxId
				return true, ""
			}
		}
		return false, fmt.Sprintf("containers: %v", cs.Containers)
	})
	phase("static pod running (CRI)")

	// One service restarted alone: the runtime, which owns the pod's
	// containers. It comes back, finds the pod's container running and
	// leaves it so (the kubelet's restart semantics: containers outlive it).
	started := n.docker(t, nil, "inspect", "-f", "{{.State.StartedAt}}", "nodelet-runtime-1")
	compose("restart", "runtime")
	eventually.State(t, 90*time.Second, "nodelet-runtime restarted and healthy", func() (bool, string) {
		out, err := n.dockerOut(nil, "inspect", "-f", "{{.State.StartedAt}} {{.State.Health.Status}}", "nodelet-runtime-1")
		if err != nil {
			return false, out
		}
		f := strings.Fields(out)
		return len(f) == 2 && f[0] != started && f[1] == "healthy", out
	})
	phase("runtime restarted and healthy")
	// Healthy is its heartbeat on the bus; that it has synced the pod
	// since is in its log: the pod's state as it reads it now.
	checkPodKept := func() (bool, string) {
		cs, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID}})
		if err != nil {
			return false, err.Error()
		}
		if len(cs.Containers) != 1 || cs.Containers[0].Id != ctrID || cs.Containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING ||
			cs.Containers[0].Metadata.Attempt != 0 {
			return false, fmt.Sprintf("want only %s running, attempt 0; have %v", ctrID, cs.Containers)
		}
		sbs, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return false, err.Error()
		}
		if len(sbs.Items) != 1 || sbs.Items[0].Id != sandboxID || sbs.Items[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
			return false, fmt.Sprintf("want only sandbox %s ready; have %v", sandboxID, sbs.Items)
		}
		return true, ""
	}
	if ok, state := checkPodKept(); !ok {
		t.Fatalf("after `docker compose restart runtime`: %s", state)
	}
	// nodelet pods (through the bus, in the restarted runtime's container)
	// reports the pod Running with its container not restarted.
	eventually.State(t, 60*time.Second, "nodelet pods: the static pod Running, 0 restarts", func() (bool, string) {
		out, err := n.dockerOut(nil, "compose", "--project-directory", src, "exec", "-T", "runtime",
			"nodelet", "pods", "--config", "/etc/nodelet/nodelet.yaml")
		for _, l := range strings.Split(out, "\n") {
			// NAME READY STATUS RESTARTS AGE
			if f := strings.Fields(l); len(f) >= 4 && strings.HasPrefix(f[0], "quick-") && f[1] == "1/1" && f[2] == "Running" && f[3] == "0" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v: %s", err, out)
	})
	if ok, state := checkPodKept(); !ok {
		t.Fatalf("after the restarted runtime synced: %s", state)
	}
	phase("pod kept across the restart (same container, attempt 0)")

	// The pod goes first (the node's workload outlives its agent, as with
	// the kubelet: `down` alone would leave it running), then the node.
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	eventually.State(t, 90*time.Second, "the static pod's sandbox removed", func() (bool, string) {
		sbs, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return false, err.Error()
		}
		return len(sbs.Items) == 0, fmt.Sprintf("sandboxes: %v", sbs.Items)
	})
	phase("pod deleted")
	compose("down")
	phase("compose down")

	// Nothing of the run is left: no container, network or volume of the
	// engine, no container or sandbox in the node's containerd, no mount in
	// the namespace beyond the test's own binds, none on the host.
	if out := n.docker(t, nil, "ps", "-aq"); out != "" {
		t.Errorf("containers left after down: %s", out)
	}
	if out := n.docker(t, nil, "network", "ls", "-q"); out != networksBefore {
		t.Errorf("networks after down %q, before up %q", out, networksBefore)
	}
	if out := n.docker(t, nil, "volume", "ls", "-q"); out != volumesBefore {
		t.Errorf("volumes after down %q, before up %q", out, volumesBefore)
	}
	cs, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(cs.Containers) != 0 {
		t.Errorf("containerd containers after down: %v %v", cs, err)
	}
	if after := n.mounts(t); !slices.Equal(after, mountsBefore) {
		t.Errorf("the namespace's mounts after down differ from before up:\nbefore %v\nafter  %v", mountsBefore, after)
	}
	if after := hostMounts(t); !slices.Equal(after, hostMountsBefore) {
		t.Errorf("the host's mounts changed: before %v, after %v", hostMountsBefore, after)
	}
	if after := forwardPolicy(t); after != forwardBefore {
		t.Errorf("the host's FORWARD policy changed: before %q, after %q", forwardBefore, after)
	}
	if rules := run(t, "iptables-save"); strings.Contains(strings.ToLower(rules), "docker") {
		t.Errorf("the host has iptables rules of docker:\n%s", rules)
	}
	phase("nothing left behind")
}

// staticPod is the manifest dropped into the static pod dir; its image is
// one scripts/setup.sh imports (nodelet.local/busybox).
const staticPod = `apiVersion: v1
kind: Pod
metadata:
  name: quick
  namespace: default
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: ["sleep", "3600"]
`
