package containerd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/testenv"
)

func TestRender(t *testing.T) {
	tests := []struct {
		name string
		cfg  containerd.Config
		want map[string]any // dotted path -> value
	}{
		{
			name: "defaults",
			cfg:  containerd.Config{},
			want: map[string]any{
				"version":                    int64(2),
				"root":                       "/var/lib/nodelet/containerd",
				"state":                      "/run/nodelet/containerd",
				"grpc.address":               "/run/nodelet/containerd/containerd.sock",
				"ttrpc.address":              "/run/nodelet/containerd/containerd.sock.ttrpc",
				"debug.address":              "",
				"metrics.address":            "",
				"cri.sandbox_image":          "nodelet.local/pause:3.10",
				"cri.restrict_oom_score_adj": true,
				"cri.cni.bin_dir":            "/usr/lib/cni",
				"cri.cni.conf_dir":           "/etc/nodelet/cni/net.d",
				"cri.containerd.snapshotter": "overlayfs",
				"cri.containerd.runtimes.runc.runtime_type":          "io.containerd.runc.v2",
				"cri.containerd.runtimes.runc.options.SystemdCgroup": false,
				"cri.stats_collect_period":                           nil,
			},
		},
		{
			name: "stats collect period",
			cfg:  containerd.Config{StatsCollectPeriod: 1},
			want: map[string]any{"cri.stats_collect_period": int64(1)},
		},
		{
			name: "set",
			cfg: containerd.Config{Root: "/r", State: "/s", Socket: "/x/c.sock", CNIConfDir: "/n",
				CNIBinDir: "/b", SandboxImage: "example.com/pause:1", TTRPCSocket: "/x/t.sock"},
			want: map[string]any{
				"root": "/r", "state": "/s", "grpc.address": "/x/c.sock", "ttrpc.address": "/x/t.sock",
				"cri.cni.conf_dir": "/n", "cri.cni.bin_dir": "/b", "cri.sandbox_image": "example.com/pause:1",
			},
		},
		{
			name: "quoting",
			cfg:  containerd.Config{Root: `/with "quotes"/and\backslash`},
			want: map[string]any{"root": `/with "quotes"/and\backslash`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := tt.cfg.Render()
			var doc map[string]any
			if err := toml.Unmarshal([]byte(text), &doc); err != nil {
				t.Fatalf("Render is not TOML: %v\n%s", err, text)
			}
			for path, want := range tt.want {
				path = strings.Replace(path, "cri.", `plugins.io\.containerd\.grpc\.v1\.cri.`, 1)
				if got := lookup(doc, path); got != want {
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
		})
	}
}

// lookup follows a dotted path; `\.` is a dot inside a key.
func lookup(doc map[string]any, path string) any {
	keys := strings.Split(strings.ReplaceAll(path, `\.`, "\x00"), ".")
	var cur any = doc
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[strings.ReplaceAll(k, "\x00", ".")]
	}
	return cur
}

func TestStartStop(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	cfg := containerd.Config{
		Root:           filepath.Join(dir, "root"),
		State:          filepath.Join(dir, "state"),
		CNIConfDir:     filepath.Join(dir, "net.d"),
		KillWithParent: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	p, err := containerd.Start(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd answered CRI after %v", time.Since(began))
	defer p.Stop()
	sock := p.Config().Socket
	if sock != filepath.Join(dir, "state", "containerd.sock") {
		t.Errorf("socket = %s", sock)
	}
	if b, err := os.ReadFile(p.Config().ConfigFile); err != nil || string(b) != cfg.Render() {
		t.Errorf("config file: %v", err)
	}

	conn, err := containerd.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "containerd" {
		t.Fatalf("Version = %v, %v", v, err)
	}
	// No conflist yet: the runtime is ready, the network is not.
	if err := containerd.NetworkReady(ctx, conn); err == nil {
		t.Errorf("NetworkReady without a CNI config")
	}

	// A second containerd on the same socket is refused.
	if _, err := containerd.Start(ctx, cfg, ""); err == nil || !strings.Contains(err.Error(), "already answers") {
		t.Errorf("second Start on %s: %v", sock, err)
	}

	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Stop returned before containerd exited")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(p.Pid())); err == nil {
		t.Errorf("containerd (pid %d) still running after Stop", p.Pid())
	}
}

func TestStartFailsFastWithoutCRI(t *testing.T) {
	testenv.RequiresRoot(t)
	for _, major := range []int{1, 2} {
		t.Run(fmt.Sprintf("containerd%d", major), func(t *testing.T) {
			var binary string
			if major == 2 {
				b, err := testenv.Containerd2()
				if err != nil {
					t.Skipf("containerd %s cannot be built here: %v", containerd.Version2, err)
				}
				binary = b.Containerd
			}
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			began := time.Now()
			// The CRI plugin does not load with a snapshotter that does not exist.
			p, err := containerd.Start(ctx, containerd.Config{
				Root: filepath.Join(dir, "root"), State: filepath.Join(dir, "state"),
				Snapshotter: "nosuch", KillWithParent: true, Major: major, Binary: binary,
			}, "")
			if err == nil {
				p.Stop()
				t.Fatal("Start succeeded without a CRI plugin")
			}
			if !strings.Contains(err.Error(), "CRI plugin is not loaded") || !strings.Contains(err.Error(), "nosuch") {
				t.Errorf("error does not say why: %v", err)
			}
			t.Logf("Start gave up after %v: %v", time.Since(began), err)
			if d := time.Since(began); d > 10*time.Second {
				t.Errorf("Start took %v to give up", d)
			}
		})
	}
}

func TestStartMissingBinary(t *testing.T) {
	dir := t.TempDir()
	_, err := containerd.Start(context.Background(), containerd.Config{
		Root: filepath.Join(dir, "root"), State: filepath.Join(dir, "state"), Binary: filepath.Join(dir, "nope"),
	}, "")
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Start with a missing binary: %v", err)
	}
}

// TestRenderGID: with a gid, containerd's [grpc] section gives the socket
// to that group (component.CRIGroup); without, it says nothing (root's).
func TestRenderGID(t *testing.T) {
	with := containerd.Config{GID: 1234}.Render()
	if !strings.Contains(with, "[grpc]\n  address = \"/run/nodelet/containerd/containerd.sock\"\n  gid = 1234\n") {
		t.Errorf("[grpc] without gid = 1234:\n%s", with)
	}
	if without := (containerd.Config{}).Render(); strings.Contains(without, "gid") {
		t.Errorf("gid rendered without one:\n%s", without)
	}
}

// TestRender3: with Major 2 the config is containerd 2.x's version 3, what
// 1.6 had in io.containerd.grpc.v1.cri spread over the plugins that hold it
// there (containerd's docs/cri/config.md).
func TestRender3(t *testing.T) {
	const (
		images  = `plugins.io\.containerd\.cri\.v1\.images.`
		runtime = `plugins.io\.containerd\.cri\.v1\.runtime.`
		grpc    = `plugins.io\.containerd\.grpc\.v1\.cri.`
	)
	tests := []struct {
		name string
		cfg  containerd.Config
		want map[string]any // dotted path -> value
	}{
		{
			name: "defaults",
			cfg:  containerd.Config{Major: 2},
			want: map[string]any{
				"version":                                         int64(3),
				"root":                                            containerd.DefaultRoot2,
				"state":                                           "/run/nodelet/containerd",
				"grpc.address":                                    "/run/nodelet/containerd/containerd.sock",
				"ttrpc.address":                                   "/run/nodelet/containerd/containerd.sock.ttrpc",
				"debug.address":                                   "",
				"metrics.address":                                 "",
				images + "snapshotter":                            "overlayfs",
				images + "disable_snapshot_annotations":           true,
				images + "pinned_images.sandbox":                  "nodelet.local/pause:3.10",
				images + "registry":                               nil,
				images + "stats_collect_period":                   nil,
				runtime + "restrict_oom_score_adj":                true,
				runtime + "netns_mounts_under_state_dir":          true,
				runtime + "cni.conf_dir":                          "/etc/nodelet/cni/net.d",
				runtime + "cni.max_conf_num":                      int64(1),
				runtime + "containerd.default_runtime_name":       "runc",
				runtime + "containerd.runtimes.runc.runtime_type": "io.containerd.runc.v2",
				runtime + "containerd.runtimes.runc.runtime_path": "/usr/local/libexec/nodelet/containerd2/containerd-shim-runc-v2",
				runtime + "containerd.runtimes.runc.options.SystemdCgroup": false,
				grpc + "disable_tcp_service":                               true,
				grpc + "stream_server_address":                             "127.0.0.1",
				// 1.6's keys are gone from the gRPC plugin.
				grpc + "sandbox_image":          nil,
				grpc + "containerd":             nil,
				grpc + "cni":                    nil,
				grpc + "restrict_oom_score_adj": nil,
			},
		},
		{
			name: "set",
			cfg: containerd.Config{Major: 2, Root: "/r", State: "/s", Socket: "/x/c.sock", CNIConfDir: "/n",
				CNIBinDir: "/b", SandboxImage: "example.com/pause:1", Binary: "/opt/c2/containerd",
				SystemdCgroup: true, RegistryConfigPath: "/h", StatsCollectPeriod: 2},
			want: map[string]any{
				images + "stats_collect_period": int64(2),
				"root":                          "/r", "state": "/s", "grpc.address": "/x/c.sock", "ttrpc.address": "/x/c.sock.ttrpc",
				runtime + "cni.conf_dir":                                   "/n",
				images + "pinned_images.sandbox":                           "example.com/pause:1",
				images + "registry.config_path":                            "/h",
				runtime + "containerd.runtimes.runc.runtime_path":          "/opt/c2/containerd-shim-runc-v2",
				runtime + "containerd.runtimes.runc.options.SystemdCgroup": true,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := tt.cfg.Render()
			var doc map[string]any
			if err := toml.Unmarshal([]byte(text), &doc); err != nil {
				t.Fatalf("Render is not TOML: %v\n%s", err, text)
			}
			for path, want := range tt.want {
				if got := lookup(doc, path); got != want {
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
			dirs, _ := lookup(doc, runtime+"cni.bin_dirs").([]any)
			if wantDir := tt.cfg.WithDefaults().CNIBinDir; len(dirs) != 1 || dirs[0] != wantDir {
				t.Errorf("cni.bin_dirs = %#v, want [%q]", dirs, wantDir)
			}
			disabled, _ := doc["disabled_plugins"].([]any)
			nri := false
			for _, p := range disabled {
				nri = nri || p == "io.containerd.nri.v1.nri"
			}
			if !nri {
				t.Errorf("NRI is not disabled (its socket is one path for every containerd): %v", disabled)
			}
		})
	}
}

// TestVersion2MatchesModule: the version the Go side expects in its cache
// dir is the one scripts/containerd2.sh builds.
func TestVersion2MatchesModule(t *testing.T) {
	b, err := os.ReadFile("../../scripts/containerd2/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "github.com/containerd/containerd/v2 " + containerd.Version2 + "\n"
	if !strings.Contains(string(b), want) {
		t.Errorf("scripts/containerd2/go.mod does not require %q:\n%s", want, b)
	}
	if got := containerd.Cached2().Dir; filepath.Base(got) != "containerd-"+containerd.Version2 {
		t.Errorf("Cached2().Dir = %s", got)
	}
}
