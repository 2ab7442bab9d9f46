package kubeletcompat

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/version"
)

// load runs Load and Map on args (with root, a fresh --root-dir, added).
func load(t *testing.T, args ...string) (*config.Config, []string, error) {
	t.Helper()
	root := t.TempDir()
	args = append([]string{"--root-dir", root, "--cert-dir", filepath.Join(root, "pki")}, args...)
	l, err := Load(args, &bytes.Buffer{})
	if err != nil {
		return nil, nil, err
	}
	return Map(l)
}

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// What kubeadm writes and passes starts nodelet with the kubelet's
// meaning: its config file, kubeadm-flags.env and the drop-in's flags.
func TestKubeadmConfigMaps(t *testing.T) {
	c, warnings, err := load(t, "--config", "testdata/kubeadm-config.yaml",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--container-runtime-endpoint=unix:///run/k3s/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
		"--node-ip=10.0.0.5", "--hostname-override=Worker-1", "--node-labels=role=edge,node.kubernetes.io/pool=edge",
		"--register-with-taints=dedicated=edge:NoSchedule", "--healthz-port=10249", "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		key       string
		got, want any
	}{
		{"node.kubeconfig", c.Node.Kubeconfig, "/etc/kubernetes/kubelet.conf"},
		{"node.bootstrapKubeconfig", c.Node.BootstrapKubeconfig, "/etc/kubernetes/bootstrap-kubelet.conf"},
		{"runtime.endpoint", c.Runtime.Endpoint, "unix:///run/k3s/containerd.sock"},
		{"node.address", c.Node.Address, "10.0.0.5"},
		{"node.name", c.Node.Name, "worker-1"},
		{"node.labels", c.Node.Labels["role"], "edge"},
		{"node.taints", len(c.Node.Taints) == 1 && c.Node.Taints[0].Key == "dedicated", true},
		{"sources.staticPodPath", c.Sources.StaticPodPath, "/etc/kubernetes/manifests"},
		{"node.clusterDNS", strings.Join(c.Node.ClusterDNS, ","), "10.96.0.10"},
		{"node.resolvConf", c.Node.ResolvConf, "/run/systemd/resolve/resolv.conf"},
		{"runtime.cgroupDriver", c.Runtime.CgroupDriver, "systemd"},
		{"node.rotateCertificates", c.Node.RotateCertificates, true},
		{"server.authentication.x509.clientCAFile", c.Server.Authentication.X509.ClientCAFile, "/etc/kubernetes/pki/ca.crt"},
		{"server.authentication.anonymous.enabled", c.Server.Authentication.Anonymous.Enabled, false},
		{"server.authorization.mode", c.Server.Authorization.Mode, "Webhook"},
		{"server.readOnlyPort", c.Server.ReadOnlyPort, 0},
		{"server.healthzBindAddress", c.Server.HealthzBindAddress, "127.0.0.1"},
		{"server.healthzPort", c.Server.HealthzPort, 10249},                   // the flag over the file's 10248
		{"runtime.maxParallelImagePulls", c.Runtime.MaxParallelImagePulls, 1}, // serializeImagePulls defaults to true
		{"status.nodeStatusUpdateFrequency", c.Status.NodeStatusUpdateFrequency, 10 * time.Second},
		{"gc.evictionHard", c.GC.EvictionHard["imagefs.inodesFree"], "5%"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.key, ch.got, ch.want)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "logging.verbosity") {
		t.Errorf("warnings %q, want the one for --v=2", warnings)
	}
}

// The drop-ins merge over the file in lexical order (subdirectories in
// place), .conf only, and the flags win over both.
func TestConfigDirAndFlagPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "config.yaml", header+"maxPods: 50\nclusterDNS: [10.0.0.10]\nevictionHard:\n  memory.available: 200Mi\n")
	drop := filepath.Join(dir, "config.d")
	write(t, drop, "20-pods.conf", header+"maxPods: 70\nevictionHard:\n  nodefs.available: 5%\n")
	write(t, drop, "10-pods.conf", header+"maxPods: 60\nclusterDomain: example.org\n")
	write(t, drop, "15/a.conf", header+"maxPods: 65\nnodeLeaseDurationSeconds: 20\n")
	write(t, drop, "99-ignored.yaml", header+"maxPods: 99\n")
	c, _, err := load(t, "--config", file, "--config-dir", drop, "--cluster-domain", "flag.example")
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.MaxPods != 70 || c.Status.NodeLeaseDurationSeconds != 20 {
		t.Errorf("maxPods %d lease %d: want 70 from the last drop-in, 20 from 15/a.conf", c.Node.MaxPods, c.Status.NodeLeaseDurationSeconds)
	}
	if c.Node.ClusterDomain != "flag.example" {
		t.Errorf("clusterDomain %q: the flag wins over the drop-in", c.Node.ClusterDomain)
	}
	// evictionHard: the file's (no defaults merged) patched key by key.
	if c.GC.EvictionHard["memory.available"] != "200Mi" || c.GC.EvictionHard["nodefs.available"] != "5%" || len(c.GC.EvictionHard) != 2 {
		t.Errorf("evictionHard %v", c.GC.EvictionHard)
	}
	if strings.Join(c.Node.ClusterDNS, ",") != "10.0.0.10" {
		t.Errorf("clusterDNS %v", c.Node.ClusterDNS)
	}
}

// Without --config the command line's legacy defaults hold, as the
// kubelet's: anonymous, AlwaysAllow, the read-only port.
func TestNoConfigLegacyDefaults(t *testing.T) {
	c, _, err := load(t, "--maximum-dead-containers=10", "--minimum-container-ttl-duration=1m")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Server.Authentication.Anonymous.Enabled || c.Server.Authentication.Webhook.Enabled ||
		c.Server.Authorization.Mode != "AlwaysAllow" || c.Server.ReadOnlyPort != 10255 {
		t.Errorf("server %+v", c.Server)
	}
	if c.GC.MaxContainers != 10 || c.GC.MinAge != time.Minute {
		t.Errorf("deprecated GC flags: maxContainers %d minAge %v", c.GC.MaxContainers, c.GC.MinAge)
	}
}

func TestRefusedByName(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name        string
		args        []string
		errContains []string
	}{
		{"unknown flag", []string{"--network-plugin=cni"}, []string{"unknown flag: --network-plugin"}},
		{"unknown field", []string{"--config", write(t, dir, "u.yaml", header+"maxPod: 5\n")}, []string{`unknown field "maxPod"`}},
		{"unknown gate", []string{"--feature-gates=NoSuchGate=true"}, []string{"NoSuchGate"}},
		{"unknown gate in the file", []string{"--config", write(t, dir, "g.yaml", header+"featureGates:\n  NoSuchGate: true\n")}, []string{"NoSuchGate"}},
		{"non-default gate", []string{"--feature-gates=InPlacePodVerticalScalingExclusiveCPUs=true"}, []string{"featureGates: InPlacePodVerticalScalingExclusiveCPUs=true"}},
		{"refused fields, all named", []string{"--config", write(t, dir, "r.yaml", header+"cpuManagerPolicy: static\npodsPerCore: 4\n")},
			[]string{"KubeletConfiguration cpuManagerPolicy", "KubeletConfiguration podsPerCore"}},
		{"refused flag value", []string{"--cpu-manager-policy=static"}, []string{"KubeletConfiguration cpuManagerPolicy"}},
		{"refused node flag", []string{"--lock-file=/var/run/lock/kubelet.lock"}, []string{"--lock-file"}},
		{"dual-stack node IP", []string{"--node-ip=10.0.0.5,fd00::5"}, []string{"--node-ip"}},
		{"kubernetes.io label", []string{"--node-labels=node-role.kubernetes.io/control-plane=,kubernetes.io/foo=bar"}, []string{"kubernetes.io/foo"}},
		{"wrong kind", []string{"--config", write(t, dir, "k.yaml", "apiVersion: v1\nkind: Pod\n")}, []string{"Pod"}},
		{"cert dir elsewhere", []string{"--cert-dir=/etc/kubelet/pki"}, []string{"--cert-dir"}},
		{"container runtime", []string{"--container-runtime=docker"}, []string{"--container-runtime"}},
		{"no limit on events", []string{"--event-qps=0"}, []string{"eventRecordQPS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := load(t, tc.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, s := range tc.errContains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

func TestAccepted(t *testing.T) {
	for _, args := range [][]string{
		{"--container-runtime=remote"},
		{"--feature-gates=KubeletCrashLoopBackOffMax=false"},
		{"--node-ip=0.0.0.0", "--cloud-provider=external"},
		{"--config", "testdata/kubeadm-config.yaml", "--vmodule=foo=4", "--log-flush-frequency=1s"},
	} {
		if _, _, err := load(t, args...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// Main writes the mapped configuration, nodelet's loader takes it, and the
// supervisor is started with it.
func TestMainStartsSupervisor(t *testing.T) {
	root := t.TempDir()
	var upArgs []string
	var stderr bytes.Buffer
	code := Main([]string{"--config", "testdata/kubeadm-config.yaml", "--kubeconfig", "/etc/kubernetes/kubelet.conf",
		"--container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "--root-dir", root, "--cert-dir", root + "/pki",
		"--cloud-provider=external", "--pod-cidr=10.244.1.0/24"},
		Options{Stdout: &bytes.Buffer{}, Stderr: &stderr, Up: func(args []string) int { upArgs = args; return 0 }})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	path := filepath.Join(root, ConfigName)
	if len(upArgs) != 2 || upArgs[0] != "--config" || upArgs[1] != path {
		t.Fatalf("supervisor started with %q", upArgs)
	}
	c, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.StateDir != root || c.Node.Kubeconfig != "/etc/kubernetes/kubelet.conf" || c.Node.PodCIDR != "10.244.1.0/24" ||
		len(c.Node.Taints) != 1 || c.Node.Taints[0].Key != "node.cloudprovider.kubernetes.io/uninitialized" {
		t.Errorf("loaded back: %+v", c.Node)
	}
	// Keys left at nodelet's default are not written (a cluster's pod CIDR stays the Node's).
	if c2, _ := os.ReadFile(path); strings.Contains(string(c2), "bus:") {
		t.Errorf("wrote defaults:\n%s", c2)
	}
	var out bytes.Buffer
	if code := Main([]string{"--version"}, Options{Stdout: &out, Stderr: &stderr}); code != 0 || out.String() != "Kubernetes "+version.Kubelet()+"\n" {
		t.Errorf("--version: %d %q", code, out.String())
	}
}

// failCgroupV1 is the kubelet's check: true, its default, refuses a
// cgroup v1 host with the kubelet's message; false runs there; a cgroup
// v2 host runs either way.
func TestFailCgroupV1(t *testing.T) {
	defer func(f func() bool) { cgroupV1Host = f }(cgroupV1Host)
	for _, tc := range []struct {
		v1      bool
		args    []string
		refused bool
	}{
		{v1: true, refused: true},
		{v1: true, args: []string{"--fail-cgroupv1=false"}},
		{v1: false},
		{v1: false, args: []string{"--fail-cgroupv1=true"}},
	} {
		cgroupV1Host = func() bool { return tc.v1 }
		config := write(t, t.TempDir(), "config.yaml", header)
		_, _, err := load(t, append([]string{"--config", config}, tc.args...)...)
		if tc.refused != (err != nil) || err != nil && !strings.Contains(err.Error(), "failCgroupV1") {
			t.Errorf("cgroup v1 host %v, %v: %v", tc.v1, tc.args, err)
		}
	}
}

// TestMain runs the package's tests as on a cgroup v2 host, whatever this
// one mounts, but where a test says otherwise.
func TestMain(m *testing.M) {
	cgroupV1Host = func() bool { return false }
	os.Exit(m.Run())
}

// The credential-provider flags and the ensure-secret-pulled-images fields
// set their runtime keys; the kubelet 1.37 default policy is nodelet's, and
// what the kubelet's validation refuses nodelet's refuses naming the key.
func TestImageCredentialsMap(t *testing.T) {
	dir := t.TempDir()
	c, _, err := load(t, "--config", write(t, dir, "default.yaml", header),
		"--image-credential-provider-config=/etc/kubernetes/credential-providers", "--image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec")
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtime.ImageCredentialProviderConfig != "/etc/kubernetes/credential-providers" ||
		c.Runtime.ImageCredentialProviderBinDir != "/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec" {
		t.Errorf("credential provider keys %q %q", c.Runtime.ImageCredentialProviderConfig, c.Runtime.ImageCredentialProviderBinDir)
	}
	if c.Runtime.ImagePullCredentialsVerificationPolicy != "NeverVerifyPreloadedImages" || c.Runtime.Validate() != nil {
		t.Errorf("default policy %q (%v)", c.Runtime.ImagePullCredentialsVerificationPolicy, c.Runtime.Validate())
	}
	c, _, err = load(t, "--config", write(t, dir, "allow.yaml", header+"imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.k8s.io/pause, mirror.example/*]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtime.ImagePullCredentialsVerificationPolicy != "NeverVerifyAllowlistedImages" ||
		strings.Join(c.Runtime.PreloadedImagesVerificationAllowlist, ",") != "registry.k8s.io/pause,mirror.example/*" || c.Runtime.Validate() != nil {
		t.Errorf("allowlist %+v (%v)", c.Runtime, c.Runtime.Validate())
	}
	c, _, err = load(t, "--config", write(t, dir, "bad.yaml", header+"imagePullCredentialsVerificationPolicy: AlwaysVerify\npreloadedImagesVerificationAllowlist: [registry.k8s.io/pause]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Runtime.Validate(); err == nil || !strings.Contains(err.Error(), "runtime.preloadedImagesVerificationAllowlist: can't be set") {
		t.Errorf("allowlist with AlwaysVerify: %v", err)
	}
}
