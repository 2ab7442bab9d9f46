package kubeletcompat

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// The kubelet v1.37.2 itself, given a KubeletConfiguration and flags,
// shows at /configz the configuration it runs with; Load, given the same,
// must come to the same one, field for field: the defaults copied from the
// kubelet (defaults.go) are its defaults, the flags override as its do.
// Only what the kubelet fills in from the machine at run time differs.
func TestLoadMatchesTheRealKubelet(t *testing.T) {
	testenv.RequiresRoot(t)
	kubelet, err := testenv.Tool("kubelet")
	if err != nil {
		t.Fatal(err)
	}
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	// What the kubelet needs to run here, and no pod cgroups of its own:
	// other tests' kubelets and nodes run beside it.
	cfg := write(t, dir, "kubelet.yaml", header+fmt.Sprintf(`staticPodPath: %s
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
address: 127.0.0.1
readOnlyPort: 0
healthzPort: 0
resolvConf: /etc/resolv.conf
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`, manifests, ctrd.Endpoint))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"config file and flags", []string{"--config", cfg, "--hostname-override", "upstream-check", "--node-labels", "tier=check", "--max-pods", "42", "--v", "2"}},
		// Without --config the command line's own defaults hold (the
		// kubelet's legacy flag defaults: anonymous, AlwaysAllow, 10255).
		{"flags only", []string{"--container-runtime-endpoint", ctrd.Endpoint, "--cgroup-driver", "cgroupfs", "--cgroups-per-qos=false",
			"--enforce-node-allocatable=", "--fail-swap-on=false", "--fail-cgroupv1=false", "--address", "127.0.0.1",
			"--read-only-port", "0", "--healthz-port", "0", "--resolv-conf", "/etc/resolv.conf", "--pod-manifest-path", manifests,
			"--hostname-override", "upstream-check"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			args := append([]string{"--root-dir", root, "--cert-dir", filepath.Join(root, "pki"), "--port", fmt.Sprint(port)}, tc.args...)
			theirs := kubeletConfigz(t, kubelet, args, root, port)
			loaded, err := Load(args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(loaded.Config)
			if err != nil {
				t.Fatal(err)
			}
			var ours map[string]any
			if err := json.Unmarshal(b, &ours); err != nil {
				t.Fatal(err)
			}
			// Type meta, and the serving certificate the kubelet makes
			// under --cert-dir at run time when none is configured.
			for _, k := range []string{"kind", "apiVersion", "tlsCertFile", "tlsPrivateKeyFile"} {
				delete(ours, k)
				delete(theirs, k)
			}
			// /configz is the kubelet's internal configuration converted
			// back to v1beta1: a *bool it never defaults
			// (SetDefaults_KubeletConfiguration leaves it nil) reads false.
			if _, ok := ours["enableSystemLogQuery"]; !ok {
				ours["enableSystemLogQuery"] = false
			}
			var diffs []string
			keys := map[string]bool{}
			for k := range ours {
				keys[k] = true
			}
			for k := range theirs {
				keys[k] = true
			}
			for k := range keys {
				if !reflect.DeepEqual(ours[k], theirs[k]) {
					diffs = append(diffs, fmt.Sprintf("%s: ours %v, the kubelet's %v", k, show2(ours[k]), show2(theirs[k])))
				}
			}
			sort.Strings(diffs)
			if len(diffs) > 0 {
				t.Errorf("Load differs from the kubelet v1.37.2's /configz in %d fields:\n%s", len(diffs), strings.Join(diffs, "\n"))
			}
		})
	}
}

// kubeletConfigz runs the kubelet with args until it answers /configz on
// port, and returns what it shows.
func kubeletConfigz(t *testing.T, kubelet string, args []string, root string, port int) map[string]any {
	t.Helper()
	var log bytes.Buffer
	cmd := exec.Command(kubelet, args...)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		// The kubelet makes its root dir a shared mount point.
		_ = syscall.Unmount(root, syscall.MNT_DETACH)
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var body []byte
	eventually.True(t, 2*time.Minute, "the kubelet's /configz", func() bool {
		select {
		case <-exited:
			t.Fatalf("the kubelet exited:\n%s", log.String())
		default:
		}
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/configz", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	var z struct {
		KubeletConfig map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(body, &z); err != nil {
		t.Fatalf("/configz: %v\n%s", err, body)
	}
	return z.KubeletConfig
}

func show2(v any) string {
	if v == nil {
		return "(unset)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
