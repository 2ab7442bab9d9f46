package units

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	sdunit "github.com/coreos/go-systemd/v22/unit"

	"github.com/nodelet/nodelet/internal/component"
)

// repoRoot is the top of the repository, from this package's directory.
const repoRoot = "../../.."

// parsed is one unit file as systemd reads it: section → key → values in
// order (a key may repeat).
type parsed map[string]map[string][]string

func parse(t *testing.T, name string, data []byte) parsed {
	t.Helper()
	opts, err := sdunit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s does not parse as a unit file: %v", name, err)
	}
	p := parsed{}
	for _, o := range opts {
		if p[o.Section] == nil {
			p[o.Section] = map[string][]string{}
		}
		p[o.Section][o.Name] = append(p[o.Section][o.Name], o.Value)
	}
	return p
}

// words is every space-separated value of key, over all its lines.
func (p parsed) words(section, key string) []string {
	var out []string
	for _, v := range p[section][key] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

func (p parsed) one(section, key string) string {
	v := p[section][key]
	if len(v) != 1 {
		return fmt.Sprintf("<%d values: %q>", len(v), v)
	}
	return v[0]
}

func rendered(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := SystemdUnits(component.Declared, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		out[f.Name] = f.Data
	}
	return out
}

// TestCheckedInFilesAreCurrent fails when deploy/systemd or
// docker-compose.yml were not regenerated after a change to the declaration or
// the renderer, or when deploy/systemd holds a unit nobody renders.
func TestCheckedInFilesAreCurrent(t *testing.T) {
	files, err := SystemdUnits(component.Declared, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(repoRoot, "deploy", "systemd")
	stale, err := Stale(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	compose, err := Compose(component.Declared, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	staleCompose, err := Stale(repoRoot, []File{{Name: ComposeFile, Data: compose}})
	if err != nil {
		t.Fatal(err)
	}
	stale = append(stale, staleCompose...)
	want := map[string]bool{"README.md": true}
	for _, f := range files {
		want[f.Name] = true
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			if !want[rel] {
				stale = append(stale, rel+" (not rendered from the declaration)")
			}
		}
		return nil
	})
	if len(stale) > 0 {
		t.Fatalf("stale generated files, run `go generate ./internal/tools/units/`:\n  %s", strings.Join(stale, "\n  "))
	}
}

// TestStaleNamesDifferences proves the staleness check can fail: a changed,
// a missing and an unchanged file.
func TestStaleNamesDifferences(t *testing.T) {
	dir := t.TempDir()
	files := []File{{Name: "a.service", Data: []byte("a\n")}, {Name: "b.service", Data: []byte("b\n")}, {Name: "c.service", Data: []byte("c\n")}}
	if err := WriteFiles(dir, files[:2]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.service"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Stale(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"b.service (differs)", "c.service (missing)"}
	if !slices.Equal(got, want) {
		t.Fatalf("Stale = %q, want %q", got, want)
	}
}

// TestUnitGraphEqualsSupervisorGraph reads the units back as systemd does
// and rebuilds the dependency graph from their After= lines: it must give
// the supervisor's start order and requirements exactly.
func TestUnitGraphEqualsSupervisorGraph(t *testing.T) {
	files := rendered(t)
	var fromUnits []component.Component
	for _, c := range component.Declared.Processes() {
		name := UnitName(c)
		data, ok := files[name]
		if !ok {
			t.Fatalf("no unit for component %s", c.Name)
		}
		u := parse(t, name, data)
		var after, wants []string
		for _, d := range u.words("Unit", "After") {
			if r, ok := strings.CutPrefix(d, "nodelet-"); ok {
				after = append(after, strings.TrimSuffix(r, ".service"))
			}
		}
		for _, d := range u.words("Unit", "Wants") {
			if r, ok := strings.CutPrefix(d, "nodelet-"); ok {
				wants = append(wants, strings.TrimSuffix(r, ".service"))
			}
		}
		req := slices.Clone(c.Requires)
		sort.Strings(req)
		sort.Strings(after)
		sort.Strings(wants)
		if !slices.Equal(after, req) || !slices.Equal(wants, req) {
			t.Errorf("%s: After=%v Wants=%v, the declaration requires %v", name, after, wants, req)
		}
		if got := u.words("Unit", "Requires"); len(got) > 0 {
			t.Errorf("%s: Requires=%v: a restart of a dependency would restart this unit", name, got)
		}
		if got := u.words("Unit", "BindsTo"); len(got) > 0 {
			t.Errorf("%s: BindsTo=%v", name, got)
		}
		hasCRI := slices.Contains(u.words("Unit", "After"), "containerd.service") &&
			slices.Contains(u.words("Unit", "Wants"), "containerd.service")
		if hasCRI != c.NeedsCRI {
			t.Errorf("%s: ordered after containerd.service = %v, NeedsCRI = %v", name, hasCRI, c.NeedsCRI)
		}
		hasNet := slices.Contains(u.words("Unit", "After"), "network-online.target")
		if hasNet != c.NeedsAPI {
			t.Errorf("%s: ordered after network-online.target = %v, NeedsAPI = %v", name, hasNet, c.NeedsAPI)
		}
		for _, kv := range [][3]string{
			{"Unit", "PartOf", Target},
			{"Unit", "StartLimitIntervalSec", "0"},
			{"Service", "Type", "notify"},
			{"Service", "NotifyAccess", "main"},
			{"Service", "ExecStart", "/usr/local/bin/" + c.Binary() + " --config /etc/nodelet/nodelet.yaml"},
			{"Service", "WatchdogSec", "30s"},
			{"Service", "Restart", "always"},
			{"Service", "RestartSec", "2s"},
			{"Service", "NoNewPrivileges", "yes"},
		} {
			if got := u.one(kv[0], kv[1]); got != kv[2] {
				t.Errorf("%s: [%s] %s=%s, want %s", name, kv[0], kv[1], got, kv[2])
			}
		}
		fromUnits = append(fromUnits, component.Component{Name: c.Name, Process: true, Requires: after})
	}
	order, err := component.Set(fromUnits).Order()
	if err != nil {
		t.Fatalf("the units' After= graph does not order: %v", err)
	}
	var got, want []string
	for _, c := range order {
		got = append(got, c.Name)
	}
	for _, c := range component.StartOrder() {
		want = append(want, c.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("start order from the units %v, supervisor's %v", got, want)
	}

	tgt := parse(t, Target, files[Target])
	var all []string
	for _, c := range component.StartOrder() {
		all = append(all, UnitName(c))
	}
	if got := tgt.words("Unit", "Wants"); !slices.Equal(got, all) {
		t.Errorf("%s Wants=%v, want every unit %v", Target, got, all)
	}
	if got := tgt.one("Install", "WantedBy"); got != "multi-user.target" {
		t.Errorf("%s WantedBy=%s", Target, got)
	}
}

// TestSandboxes checks each daemon gets what it needs and no more: the
// runtime stays in the host's mount namespace (its tmpfs volumes must reach
// containerd), the others get a read-only system with the state dir
// writable, gc alone gets /var/log/pods and DAC capabilities.
// TestOwnSeedOnly: each daemon's unit hands it its own bus seed and no
// other, and hides the directory of seeds from every daemon with a mount
// namespace of its own.
func TestOwnSeedOnly(t *testing.T) {
	files := rendered(t)
	for _, c := range component.StartOrder() {
		unit := string(files[UnitName(c)])
		creds := 0
		for _, l := range strings.Split(unit, "\n") {
			if strings.HasPrefix(l, "LoadCredential=") {
				creds++
				if want := "LoadCredential=bus-seed:/var/lib/nodelet/credentials/" + c.Name + ".nk"; l != want {
					t.Errorf("%s: %s, want %s", c.Name, l, want)
				}
			}
		}
		hidden := strings.Contains(unit, "\nInaccessiblePaths=-/var/lib/nodelet/credentials\n")
		switch {
		case c.Name == "bus":
			if creds != 0 || hidden {
				t.Errorf("bus: the bus makes the seeds; it loads none and must see them")
			}
		case creds != 1:
			t.Errorf("%s: %d LoadCredential= lines, want 1", c.Name, creds)
		case !hidden && c.Name != "runtime":
			t.Errorf("%s: the seeds directory is not hidden", c.Name)
		}
	}
}

func TestSandboxes(t *testing.T) {
	files := rendered(t)
	// Settings that give a unit its own mount namespace.
	mountNS := []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "ReadWritePaths",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
		"StateDirectory", "LogsDirectory", "PrivateMounts", "InaccessiblePaths"}
	for _, tc := range []struct {
		name       string
		hostMounts bool
		caps       []string // nil: unrestricted
		drop       []string // taken from root's
		logs       bool     // LogsDirectory= (root's)
		logsRW     bool     // writes the pod logs dir of another
		devices    bool
		netlink    bool
		loopback   bool
	}{
		{name: "bus", caps: []string{}, loopback: true},
		{name: "sources", caps: []string{"CAP_DAC_READ_SEARCH"}},
		{name: "admission", caps: []string{"CAP_DAC_READ_SEARCH"}}, // reads kube-apiserver for CSI attach limits
		{name: "runtime", hostMounts: true, netlink: true, drop: []string{"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"}},
		{name: "prober", caps: []string{}, netlink: true},
		{name: "status", caps: []string{"CAP_DAC_READ_SEARCH"}, devices: true, netlink: true},
		{name: "server", caps: []string{"CAP_DAC_READ_SEARCH"}, devices: true, netlink: true},
		{name: "gc", caps: []string{"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_SYS_BOOT"}, logsRW: true, loopback: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := parse(t, tc.name, files["nodelet-"+tc.name+".service"])
			s := u["Service"]
			if tc.hostMounts {
				for _, k := range mountNS {
					if _, ok := s[k]; ok {
						t.Errorf("%s= makes a private mount namespace", k)
					}
				}
			} else {
				if u.one("Service", "ProtectSystem") != "strict" {
					t.Errorf("want ProtectSystem=strict, got %v", s)
				}
				if _, ok := s["PrivateDevices"]; ok == tc.devices {
					t.Errorf("PrivateDevices set = %v, want %v", ok, !tc.devices)
				}
			}
			_, set := s["CapabilityBoundingSet"]
			caps := u.words("Service", "CapabilityBoundingSet")
			switch {
			case tc.drop != nil:
				want := append([]string{"~" + tc.drop[0]}, tc.drop[1:]...)
				if !slices.Equal(caps, want) {
					t.Errorf("CapabilityBoundingSet=%q, want root's but %q", caps, tc.drop)
				}
			case tc.caps == nil && set:
				t.Errorf("CapabilityBoundingSet=%q, want root's capabilities", caps)
			case tc.caps != nil && (!set || !slices.Equal(caps, tc.caps)):
				t.Errorf("CapabilityBoundingSet=%q (set %v), want %q", caps, set, tc.caps)
			}
			if got := u.one("Service", "LogsDirectory") == "pods"; got != tc.logs {
				t.Errorf("LogsDirectory=pods = %v, want %v", got, tc.logs)
			}
			if got := slices.Contains(u.words("Service", "ReadWritePaths"), "-/var/log/pods"); got != tc.logsRW {
				t.Errorf("ReadWritePaths=-/var/log/pods = %v, want %v", got, tc.logsRW)
			}
			if got := slices.Contains(u.words("Service", "RestrictAddressFamilies"), "AF_NETLINK"); got != tc.netlink {
				t.Errorf("AF_NETLINK allowed = %v, want %v", got, tc.netlink)
			}
			if got := u.one("Service", "IPAddressDeny") == "any"; got != tc.loopback {
				t.Errorf("IPAddressDeny=any = %v, want %v", got, tc.loopback)
			}
		})
	}
}

func TestRenderRejectsUnknownComponent(t *testing.T) {
	// A process declared without a sandbox cannot slip into the units
	// unconfined.
	cs := append(component.Declared.Clone(), component.Component{Name: "extra", Process: true, Requires: []string{"bus"}})
	if _, err := SystemdUnits(cs, Defaults()); err == nil || !strings.Contains(err.Error(), "extra declares no systemd sandbox") {
		t.Errorf("SystemdUnits with a component without sandbox: err = %v", err)
	}
	// One requiring what is not declared orders nowhere.
	cs = append(component.Declared.Clone(), component.Component{Name: "extra", Process: true, Requires: []string{"nothing"}})
	if _, err := Compose(cs, Defaults()); err == nil || !strings.Contains(err.Error(), "unknown component nothing") {
		t.Errorf("Compose with an unknown requirement: err = %v", err)
	}
}

// systemdAnalyze returns systemd-analyze, installing Debian's systemd
// package when it is missing (PID 1 need not be systemd: verify and the
// offline security review only read unit files).
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("systemd-analyze"); err == nil {
		return p
	}
	t.Log("systemd-analyze missing: apt-get install systemd")
	install := func() error {
		cmd := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", "systemd")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := install(); err != nil {
		if out, uerr := exec.Command("apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			t.Fatalf("apt-get update: %v: %s", uerr, out)
		}
		if err := install(); err != nil {
			t.Fatalf("apt-get install systemd: %v", err)
		}
	}
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze still missing after installing systemd: %v", err)
	}
	return p
}

// unitRoot makes a filesystem root for systemd-analyze --root: the
// distribution's units (sysinit.target, containerd.service, ...), the
// given files in /etc/systemd/system and an executable stub for every
// ExecStart binary, so that verify checks our units without installing
// anything on this machine.
func unitRoot(t *testing.T, files map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	sysUnits := "/usr/lib/systemd/system"
	if _, err := os.Stat(sysUnits); err != nil {
		sysUnits = "/lib/systemd/system"
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", sysUnits, filepath.Join(root, "usr/lib/systemd/system")).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v: %s", sysUnits, err, out)
	}
	// The drop-in extends containerd.service, which Debian's containerd
	// package ships (scripts/setup.sh installs it); without it, a stand-in.
	cd := filepath.Join(root, "usr/lib/systemd/system/containerd.service")
	if _, err := os.Stat(cd); err != nil {
		standIn := "[Unit]\nDescription=containerd (stand-in)\n\n[Service]\nType=notify\nExecStart=/usr/bin/containerd\n"
		if err := os.WriteFile(cd, []byte(standIn), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	etc := filepath.Join(root, "etc/systemd/system")
	var fs []File
	for name, data := range files {
		fs = append(fs, File{Name: name, Data: data})
		svc := parse(t, name, data)["Service"]
		for _, o := range append(slices.Clone(svc["ExecStart"]), svc["ExecStartPre"]...) {
			bin, _, _ := strings.Cut(strings.TrimLeft(o, "+-@!:"), " ")
			if bin == "" {
				continue
			}
			stub := filepath.Join(root, bin)
			if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := WriteFiles(etc, fs); err != nil {
		t.Fatal(err)
	}
	return root
}

func verify(t *testing.T, analyze, root string, units ...string) (string, error) {
	t.Helper()
	args := append([]string{"verify", "--man=no", "--root=" + root}, units...)
	out, err := exec.Command(analyze, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on every unit and
// on containerd.service with nodelet's drop-in: it must pass and say
// nothing (unknown keys and bad values are only warnings to it). A broken
// unit must fail the same check, so the check can fail.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	files := rendered(t)
	root := unitRoot(t, files)
	names := []string{Target, "containerd.service"}
	for _, c := range component.StartOrder() {
		names = append(names, UnitName(c))
	}
	out, err := verify(t, analyze, root, names...)
	if err != nil || out != "" {
		t.Fatalf("systemd-analyze verify %v: %v\n%s", names, err, out)
	}

	for _, tc := range []struct{ name, from, to string }{
		{"unknown key", "Type=notify", "Type=notify\nWatchdogSecs=30s"},
		{"bad value", "Restart=always", "Restart=sometimes"},
		{"missing requirement", "PartOf=nodelet.target", "PartOf=nodelet.target\nRequires=nodelet-nothere.service"},
	} {
		t.Run("broken/"+tc.name, func(t *testing.T) {
			broken := map[string][]byte{}
			for k, v := range files {
				broken[k] = v
			}
			broken["nodelet-sources.service"] = bytes.Replace(files["nodelet-sources.service"], []byte(tc.from), []byte(tc.to), 1)
			out, err := verify(t, analyze, unitRoot(t, broken), "nodelet-sources.service")
			if err == nil && out == "" {
				t.Fatalf("verify accepted a unit with %s", tc.name)
			}
		})
	}
}

// TestHardeningExposure runs systemd's own offline security review: each
// sandboxed daemon must stay "OK" (exposure at most 4.0 of 10); the
// runtime, which needs the host's mounts and root's capabilities, at most
// 8.5. A hardening line lost in a refactor fails here.
func TestHardeningExposure(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := unitRoot(t, rendered(t))
	for _, c := range component.StartOrder() {
		threshold := 40
		if c.Name == "runtime" {
			threshold = 85
		}
		out, err := exec.Command(analyze, "security", "--offline=yes", "--root="+root,
			fmt.Sprintf("--threshold=%d", threshold), UnitName(c)).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Errorf("%s: exposure above %.1f: %v\n%s", UnitName(c), float64(threshold)/10, err, lines[len(lines)-1])
		}
	}
}

// TestOwnUsers: every daemon that need not be root runs as its own user in
// group nodelet and owns exactly its parts of the state dir; every root
// daemon's unit says why; the sysusers.d file declares exactly those users.
func TestOwnUsers(t *testing.T) {
	files := rendered(t)
	var users []string
	for _, c := range component.StartOrder() {
		u := parse(t, c.Name, files[UnitName(c)])
		user, _ := u["Service"]["User"]
		if c.User() == "" {
			if len(user) > 0 {
				t.Errorf("%s: User=%v for a root daemon", c.Name, user)
			}
			if len(c.Root) == 0 || !strings.Contains(string(files[UnitName(c)]), "# Runs as root.\n# "+c.Root[0]+"\n") {
				t.Errorf("%s runs as root without saying why", c.Name)
			}
			if _, ok := u["Service"]["StateDirectory"]; ok && u.one("Service", "StateDirectory") != "nodelet" {
				t.Errorf("%s: StateDirectory=%s", c.Name, u.one("Service", "StateDirectory"))
			}
			continue
		}
		users = append(users, c.User())
		if got := u.one("Service", "User"); got != "nodelet-"+c.Name {
			t.Errorf("%s: User=%s", c.Name, got)
		}
		if got := u.one("Service", "Group"); got != "nodelet" {
			t.Errorf("%s: Group=%s", c.Name, got)
		}
		want := []string{"nodelet/run/" + c.Name}
		if c.Name == "bus" {
			want = []string{"nodelet/bus", "nodelet/credentials", "nodelet/run/bus"}
		}
		if got := u.words("Service", "StateDirectory"); !slices.Equal(got, want) {
			t.Errorf("%s: StateDirectory=%v, want %v (never the whole state dir: systemd would chown it to this user)", c.Name, got, want)
		}
		if got := u.words("Service", "AmbientCapabilities"); !slices.Equal(got, u.words("Service", "CapabilityBoundingSet")) {
			t.Errorf("%s: AmbientCapabilities=%v, bounding set %v", c.Name, got, u.words("Service", "CapabilityBoundingSet"))
		}
	}
	if want := []string{"nodelet-bus", "nodelet-sources", "nodelet-devices", "nodelet-admission", "nodelet-prober", "nodelet-status", "nodelet-server", "nodelet-gc"}; !slices.Equal(users, want) {
		t.Errorf("own users %v, want %v", users, want)
	}
	var declared []string
	for _, l := range strings.Split(string(files[SysusersFile]), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "u" {
			declared = append(declared, f[1])
		}
		if len(f) >= 2 && f[0] == "g" && !slices.Contains([]string{"nodelet", "nodelet-cri", "nodelet-api"}, f[1]) {
			t.Errorf("sysusers declares group %s", f[1])
		}
	}
	if !slices.Equal(declared, users) {
		t.Errorf("sysusers.d declares %v, units run as %v", declared, users)
	}
}

// TestStateDirElsewhere: a node.stateDir other than the default renders
// into every path the units name; one outside /var/lib is refused.
func TestStateDirElsewhere(t *testing.T) {
	o := Defaults()
	o.StateDir, o.PodLogsDir = "/var/lib/node-a", "/var/log/node-a-pods"
	files, err := SystemdUnits(component.Declared, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(string(f.Data), "/var/lib/nodelet/credentials") || strings.Contains(string(f.Data), "StateDirectory=nodelet") {
			t.Errorf("%s still names the default state dir", f.Name)
		}
		if f.Name == "nodelet-bus.service" && !strings.Contains(string(f.Data), "\nStateDirectory=node-a/bus node-a/credentials node-a/run/bus\n") {
			t.Errorf("bus unit:\n%s", f.Data)
		}
		if f.Name == "nodelet-gc.service" && !strings.Contains(string(f.Data), "\nReadWritePaths=-/var/log/node-a-pods\n") {
			t.Errorf("gc unit has no ReadWritePaths=-/var/log/node-a-pods")
		}
	}
	for _, bad := range []struct{ state, logs string }{{"/srv/nodelet", "/var/log/pods"}, {"/var/lib", "/var/log/pods"}, {"/var/lib/nodelet", "/tmp/pods"}, {"/var/lib/x/../nodelet", "/var/log/pods"}} {
		o.StateDir, o.PodLogsDir = bad.state, bad.logs
		if _, err := SystemdUnits(component.Declared, o); err == nil || !strings.Contains(err.Error(), "must be a clean path below") {
			t.Errorf("state dir %s, logs %s: err = %v", bad.state, bad.logs, err)
		}
	}
}

// TestCgroupRoot: the runtime's unit makes runtime.cgroupRoot, as root,
// before the runtime (without CAP_DAC_OVERRIDE) starts, in the driver's
// form (the systemd driver's slices on cgroup v1 only); no other unit
// does; a root that is no plain path is refused, as it goes into a shell
// command. TestUnitsUnderSystemd runs the cgroupfs command on a booted
// machine, TestNodeUnderSystemdDriver the systemd one.
func TestCgroupRoot(t *testing.T) {
	for _, tc := range []struct {
		driver, root, cmd string
	}{
		{"cgroupfs", "/node-a/pods", `/bin/sh -c 'if [ -e /sys/fs/cgroup/cgroup.controllers ]; then mkdir -p /sys/fs/cgroup/node-a/pods; else for h in /sys/fs/cgroup/*/; do if [ -e "$${h}cgroup.procs" ]; then mkdir -p "$${h}node-a/pods"; fi; done; fi'`},
		{"systemd", "/node-a/pods", `/bin/sh -c 'if [ -e /sys/fs/cgroup/cgroup.controllers ]; then :; else for h in /sys/fs/cgroup/*/; do if [ -e "$${h}cgroup.procs" ]; then mkdir -p "$${h}node_a.slice/node_a-pods.slice"; fi; done; fi'`},
		{"systemd", "/kubepods", `/bin/sh -c 'if [ -e /sys/fs/cgroup/cgroup.controllers ]; then :; else for h in /sys/fs/cgroup/*/; do if [ -e "$${h}cgroup.procs" ]; then mkdir -p "$${h}kubepods.slice"; fi; done; fi'`},
	} {
		o := Defaults()
		o.CgroupRoot, o.CgroupDriver = tc.root, tc.driver
		files, err := SystemdUnits(component.Declared, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			has := strings.Contains(string(f.Data), "\nExecStartPre=+"+tc.cmd+"\n")
			if has != (f.Name == "nodelet-runtime.service") {
				t.Errorf("%s %s: %s makes the cgroup root %v", tc.driver, tc.root, f.Name, has)
			}
		}
	}
	o := Defaults()
	o.CgroupDriver = "systemd"
	o.CgroupRoot = "/a_b"
	if _, err := SystemdUnits(component.Declared, o); err == nil || !strings.Contains(err.Error(), "runtime.cgroupRoot") {
		t.Errorf("cgroup root /a_b under systemd: err = %v", err)
	}
	o.CgroupRoot, o.CgroupDriver = "/nodelet", "cgroupv2"
	if _, err := SystemdUnits(component.Declared, o); err == nil || !strings.Contains(err.Error(), "runtime.cgroupDriver") {
		t.Errorf("cgroup driver cgroupv2: err = %v", err)
	}
	o.CgroupDriver = "cgroupfs"
	for _, bad := range []string{"", "/", "nodelet", "/a/../b", "/a b", "/a';reboot;'", "/a$b"} {
		o.CgroupRoot = bad
		if _, err := SystemdUnits(component.Declared, o); err == nil || !strings.Contains(err.Error(), "runtime.cgroupRoot") {
			t.Errorf("cgroup root %q: err = %v", bad, err)
		}
	}
}

// TestContainerdDropIn: the drop-in runs the containerd of
// runtime.containerdVersion (2.x by default, as scripts/setup.sh installs
// it; Debian's 1.6 with 1) on the config setup.sh writes; another version
// is refused by its key.
func TestContainerdDropIn(t *testing.T) {
	for _, tc := range []struct {
		version int
		exec    string
	}{
		{2, "/usr/local/libexec/nodelet/containerd2/containerd --config /etc/nodelet/containerd/config.toml"},
		{1, "/usr/bin/containerd --config /etc/nodelet/containerd/config.toml"},
	} {
		o := Defaults()
		o.ContainerdVersion = tc.version
		files, err := SystemdUnits(component.Declared, o)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range files {
			if f.Name == ContainerdDropIn {
				got = parse(t, f.Name, f.Data)["Service"]["ExecStart"]
			}
		}
		if want := []string{"", tc.exec}; !slices.Equal(got, want) {
			t.Errorf("containerd %d: ExecStart = %q, want %q", tc.version, got, want)
		}
	}
	if Defaults().ContainerdVersion != 2 {
		t.Errorf("default containerd version %d, want 2 (what scripts/setup.sh installs)", Defaults().ContainerdVersion)
	}
	o := Defaults()
	o.ContainerdVersion = 3
	if _, err := SystemdUnits(component.Declared, o); err == nil || !strings.Contains(err.Error(), "runtime.containerdVersion") {
		t.Errorf("containerd version 3: err = %v", err)
	}
}
