package units

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
)

// composeFile is the part of the Compose specification docker-compose.yml
// uses. It is decoded strictly: a key outside it fails the test, so the
// struct is the file's schema.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image string `json:"image"`
	Build struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Command         []string `json:"command"`
	NetworkMode     string   `json:"network_mode"`
	Privileged      bool     `json:"privileged"`
	CapAdd          []string `json:"cap_add"`
	SecurityOpt     []string `json:"security_opt"`
	Cgroup          string   `json:"cgroup"`
	Restart         string   `json:"restart"`
	StopGracePeriod string   `json:"stop_grace_period"`
	Volumes         []string `json:"volumes"`
	Healthcheck     struct {
		Test          []string `json:"test"`
		Interval      string   `json:"interval"`
		Timeout       string   `json:"timeout"`
		Retries       int      `json:"retries"`
		StartPeriod   string   `json:"start_period"`
		StartInterval string   `json:"start_interval"`
	} `json:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ComposeFile))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s does not parse: %v", ComposeFile, err)
	}
	return f
}

// TestComposeMatchesGraph parses docker-compose.yml and checks that its
// services are the declared components, each running its own binary, and
// that depends_on (all on health) gives the supervisor's start order.
func TestComposeMatchesGraph(t *testing.T) {
	f := loadCompose(t)
	var names []string
	for n := range f.Services {
		names = append(names, n)
	}
	var want []string
	for _, c := range component.Declared.Processes() {
		want = append(want, c.Name)
	}
	sort.Strings(names)
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, graph components %v", names, want)
	}
	image := f.Services["bus"].Image
	var fromCompose []component.Component
	for _, c := range component.Declared.Processes() {
		s := f.Services[c.Name]
		if len(s.Command) == 0 || s.Command[0] != c.Binary() || !slices.Equal(s.Command[1:], []string{"--config", DefaultConfigPath}) {
			t.Errorf("%s: command %q, want %s --config %s", c.Name, s.Command, c.Binary(), DefaultConfigPath)
		}
		if s.Image == "" || s.Image != image || s.Build.Dockerfile != "deploy/Dockerfile" || s.Build.Context != "." {
			t.Errorf("%s: image %q build %+v: every service runs the one image of deploy/Dockerfile", c.Name, s.Image, s.Build)
		}
		if s.NetworkMode != "host" {
			t.Errorf("%s: network_mode %q: the bus is on loopback, every service must share the host's network", c.Name, s.NetworkMode)
		}
		wantTest := []string{"CMD", "nodelet", "health", c.Name, "--config", DefaultConfigPath}
		if !slices.Equal(s.Healthcheck.Test, wantTest) {
			t.Errorf("%s: healthcheck %q, want %q", c.Name, s.Healthcheck.Test, wantTest)
		}
		var deps []string
		for d, cond := range s.DependsOn {
			deps = append(deps, d)
			if cond.Condition != "service_healthy" {
				t.Errorf("%s: depends_on %s with condition %q, want service_healthy", c.Name, d, cond.Condition)
			}
		}
		sort.Strings(deps)
		req := slices.Clone(c.Requires)
		sort.Strings(req)
		if !slices.Equal(deps, req) {
			t.Errorf("%s: depends_on %v, the declaration requires %v", c.Name, deps, req)
		}
		if s.Privileged {
			t.Errorf("%s: privileged; cap_add names what a service needs", c.Name)
		}
		if mounts := slices.Equal(s.CapAdd, []string{"SYS_ADMIN"}) && slices.Equal(s.SecurityOpt, []string{"apparmor=unconfined"}); mounts != (c.Name == "runtime") {
			t.Errorf("%s: cap_add %v, security_opt %v; only the runtime (mounts) needs SYS_ADMIN, unconfined", c.Name, s.CapAdd, s.SecurityOpt)
		}
		fromCompose = append(fromCompose, component.Component{Name: c.Name, Process: true, Requires: deps})
	}
	order, err := component.Set(fromCompose).Order()
	if err != nil {
		t.Fatalf("depends_on does not order: %v", err)
	}
	var got, wantOrder []string
	for _, c := range order {
		got = append(got, c.Name)
	}
	for _, c := range component.StartOrder() {
		wantOrder = append(wantOrder, c.Name)
	}
	if !slices.Equal(got, wantOrder) {
		t.Errorf("start order from depends_on %v, supervisor's %v", got, wantOrder)
	}
}

// TestComposeMountsMatchNodeConfig loads deploy/nodelet.yaml, the config the
// services run with, and checks each service mounts the host paths that
// config points it at.
func TestComposeMountsMatchNodeConfig(t *testing.T) {
	flags := pflag.NewFlagSet("test", pflag.ContinueOnError)
	loader := config.NewLoader(flags)
	if err := flags.Parse([]string{"--config", filepath.Join(repoRoot, "deploy", "nodelet.yaml")}); err != nil {
		t.Fatal(err)
	}
	cfg, err := loader.Load()
	if err != nil {
		t.Fatal(err)
	}
	f := loadCompose(t)
	mounts := func(name string) map[string]string {
		m := map[string]string{}
		for _, v := range f.Services[name].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 || parts[0] != parts[1] && !strings.HasPrefix(parts[0], "./") {
				t.Errorf("%s: volume %q: host paths are mounted at the same path", name, v)
			}
			opts := ""
			if len(parts) > 2 {
				opts = parts[2]
			}
			m[parts[1]] = opts
		}
		return m
	}
	for _, c := range component.Declared.Processes() {
		m := mounts(c.Name)
		if _, ok := m[DefaultConfigPath]; !ok {
			t.Errorf("%s: no config mounted at %s", c.Name, DefaultConfigPath)
		}
		if _, ok := m[cfg.Node.StateDir]; !ok {
			t.Errorf("%s: state dir %s (node.stateDir) not mounted", c.Name, cfg.Node.StateDir)
		}
		if _, ok := m[filepath.Dir(cfg.Runtime.SocketPath())]; ok != c.NeedsCRI {
			t.Errorf("%s: CRI socket dir %s mounted = %v, NeedsCRI = %v", c.Name, filepath.Dir(cfg.Runtime.SocketPath()), ok, c.NeedsCRI)
		}
	}
	rt := mounts("runtime")
	if rt[cfg.Node.StateDir] != "rshared" {
		t.Errorf("runtime: state dir mounted %q, want rshared (its tmpfs volumes must reach containerd)", rt[cfg.Node.StateDir])
	}
	for _, p := range []string{cfg.Node.PodLogsDir, cfg.Runtime.CNIConfDir} {
		if opts, ok := rt[p]; !ok || opts == "ro" {
			t.Errorf("runtime: %s must be mounted writable, got %q (mounted %v)", p, opts, ok)
		}
	}
	for _, p := range cfg.Runtime.CNIBinDirs {
		if _, ok := rt[p]; !ok {
			t.Errorf("runtime: CNI plugin dir %s (runtime.cniBinDirs) not mounted", p)
		}
	}
	if opts, ok := mounts("gc")[cfg.Node.PodLogsDir]; !ok || opts == "ro" {
		t.Errorf("gc: %s must be mounted writable", cfg.Node.PodLogsDir)
	}
	if _, ok := mounts("sources")[cfg.Sources.StaticPodPath]; !ok {
		t.Errorf("sources: static pod path %s not mounted", cfg.Sources.StaticPodPath)
	}
}

// TestDockerfileBuildsEveryBinary checks the image has what the compose
// services run: every nodelet-<name> and nodelet (the health checks), in
// /usr/local/bin, built in stage "build" or taken from bin/image/
// (BINARIES=prebuilt), and that the last stage builds without a network.
// internal/tools/units/composerun builds and runs it.
func TestDockerfileBuildsEveryBinary(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	if !regexp.MustCompile(`(?m)^RUN .*go build .*-o /out/usr/local/bin/ \./cmd/\.\.\. \\\n && /out/usr/local/bin/nodeletd link /out/usr/local/bin`).MatchString(df) {
		t.Error("deploy/Dockerfile does not build ./cmd/... into /out/usr/local/bin and link the daemons to nodeletd")
	}
	if !strings.Contains(df, "\nFROM scratch AS prebuilt\nCOPY bin/image/ /out/usr/local/bin/\n") {
		t.Error("deploy/Dockerfile's prebuilt stage does not take bin/image/")
	}
	froms := regexp.MustCompile(`(?m)^FROM .*$`).FindAllStringIndex(df, -1)
	if len(froms) != 4 {
		t.Fatalf("deploy/Dockerfile has %d stages, want 4 (build, prebuilt, binaries, run)", len(froms))
	}
	last := df[froms[3][0]:]
	if !strings.Contains(last, "COPY --from=binaries /out/ /") {
		t.Error("deploy/Dockerfile's last stage does not copy the binaries")
	}
	if regexp.MustCompile(`(?m)^RUN `).MatchString(last) {
		t.Error("deploy/Dockerfile's last stage has a RUN: it must build without a network")
	}
	// nodelet, and nodeletd with every component (cmd/nodeletd's own test
	// holds it to the declaration).
	for _, bin := range []string{"nodelet", "nodeletd"} {
		if _, err := os.Stat(filepath.Join(repoRoot, "cmd", bin, "main.go")); err != nil {
			t.Errorf("./cmd/... does not build %s: %v", bin, err)
		}
	}
}
