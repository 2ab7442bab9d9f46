package images_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// The conformance stand-ins in real containers: what the specs that failed
// on them run, as they run it (the harness's kubectl exec is `/bin/sh -x -c
// CMD`, test/e2e/framework/pod/output.RunHostCmd).
func TestConformanceStandInsInContainers(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	cri := c.RuntimeClient(t)
	refs := importStandIns(ctx, t, c, images.ConformanceInputs{
		Agnhost: fakeAgnhost(t),
		Nnp:     images.DefaultBusybox,
		Shell:   "/bin/bash-static",
		// E2ETools is empty: built from this module, as the harness does.
	})

	t.Run("busybox shells", func(t *testing.T) {
		// Kubelet "should not write to root filesystem" compares busybox
		// ash's message; ConfigMap and Secret "consumable via the
		// environment" print names ash 1.35 drops.
		id := startContainer(ctx, t, cri, refs["busybox:1.37.0-2"], false, func(cfg *runtimeapi.ContainerConfig) {
			cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true}}
			cfg.Envs = []*runtimeapi.KeyValue{{Key: "data-1", Value: []byte("value-1")}, {Key: "p-data-1", Value: []byte("value-1")}}
		})
		if _, stderr := exec(ctx, t, cri, id, "/bin/sh", "-c", "echo test > /file"); stderr != "/bin/sh: can't create /file: Read-only file system\n" {
			t.Errorf("/bin/sh on a read-only root: stderr %q, want busybox ash's message", stderr)
		}
		if stdout, _ := exec(ctx, t, cri, id, "sh", "-c", "env"); !strings.Contains(stdout, "data-1=value-1\n") || !strings.Contains(stdout, "p-data-1=value-1\n") {
			t.Errorf("sh -c env: %q, want data-1 and p-data-1 in it", stdout)
		}
	})

	t.Run("agnhost tools in a host-network pod", func(t *testing.T) {
		// Networking "node-pod communication: http" and "udp": curl with
		// timeouts (busybox wget -T segfaulted) and nc -u (busybox's has
		// no -u), from a host-network agnhost pod to the node's address.
		httpAddr, udpAddr := hostnameServers(t)
		id := startContainer(ctx, t, cri, refs["agnhost:2.66.1"], true, nil)
		if stdout, stderr := exec(ctx, t, cri, id, "/bin/sh", "-x", "-c",
			fmt.Sprintf("curl -g -q -s --max-time 15 --connect-timeout 1 http://%s/hostName", httpAddr)); stdout != "netserver-0" {
			t.Errorf("curl: stdout %q, stderr %q", stdout, stderr)
		}
		host, port, _ := net.SplitHostPort(udpAddr)
		if stdout, stderr := exec(ctx, t, cri, id, "/bin/sh", "-x", "-c",
			fmt.Sprintf("echo hostName | nc -w 1 -u %s %s", host, port)); stdout != "netserver-0" {
			t.Errorf("nc -u: stdout %q, stderr %q", stdout, stderr)
		}
	})
}

// fakeAgnhost lays out agnhost and what build-conformance leaves beside it,
// with busybox as the binary: the specs' commands here need only its shell
// and the image's tools.
func fakeAgnhost(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"agnhost-porter/localhost.crt", "agnhost-porter/localhost.key",
		"agnhost-pages/kitten/kitten.jpg", "agnhost-pages/kitten/data.json",
		"agnhost-pages/nautilus/nautilus.jpg", "agnhost-pages/nautilus/data.json"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "agnhost")
	if err := os.Symlink(images.DefaultBusybox, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// importStandIns builds the stand-ins and imports them into c, returning
// their references by the part after e2e-test-images/.
func importStandIns(ctx context.Context, t *testing.T, c *testenv.Containerd, in images.ConformanceInputs) map[string]string {
	t.Helper()
	tars, err := images.BuildConformanceImages(ctx, in, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, tb := range tars {
		if err := images.Import(ctx, c.Address, "k8s.io", tb.Path); err != nil {
			t.Fatal(err)
		}
		refs[tb.Ref[strings.LastIndex(tb.Ref, "/")+1:]] = tb.Ref
	}
	return refs
}

// startContainer runs a sandbox and in it one container of image that
// sleeps, with edit applied to its config, and returns the container's ID.
func startContainer(ctx context.Context, t *testing.T, cri *testenv.CRI, image string, hostNetwork bool, edit func(*runtimeapi.ContainerConfig)) string {
	t.Helper()
	name := strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name()))
	uid := fmt.Sprintf("uid-%d", time.Now().UnixNano())
	network := runtimeapi.NamespaceMode_POD
	if hostNetwork {
		network = runtimeapi.NamespaceMode_NODE
	}
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: network},
		}},
	}
	sb, err := cri.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbConfig})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		_, _ = cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	})
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  []string{"/bin/sleep", "3600"},
		LogPath:  "main.log",
	}
	if edit != nil {
		edit(cfg)
	}
	ctr, err := cri.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sb.PodSandboxId, Config: cfg, SandboxConfig: sbConfig})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if _, err := cri.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return ctr.ContainerId
}

func exec(ctx context.Context, t *testing.T, cri *testenv.CRI, id string, cmd ...string) (stdout, stderr string) {
	t.Helper()
	resp, err := cri.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 60})
	if err != nil {
		t.Fatalf("ExecSync %q: %v", cmd, err)
	}
	return string(resp.Stdout), string(resp.Stderr)
}

// hostnameServers answer "netserver-0" over HTTP (/hostName) and UDP on
// loopback, as agnhost netexec does on a node-pod spec's endpoint.
func hostnameServers(t *testing.T) (httpAddr, udpAddr string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hostName" {
			fmt.Fprint(w, "netserver-0")
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte("netserver-0"), from)
		}
	}()
	return l.Addr().String(), pc.LocalAddr().String()
}
