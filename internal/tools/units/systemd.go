package units

import (
	"fmt"
	"path"
	"strings"
	"unicode"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/containerd"
)

// SysusersFile declares the users and the group for systemd-sysusers.
const SysusersFile = "sysusers.d/nodelet.conf"

// unitFile builds a unit: sections of commented Key=Value lines.
type unitFile struct {
	b strings.Builder
}

func (u *unitFile) comment(lines ...string) {
	for _, l := range lines {
		if l == "" {
			u.b.WriteString("#\n")
			continue
		}
		u.b.WriteString("# " + l + "\n")
	}
}

func (u *unitFile) section(name string) {
	if u.b.Len() > 0 {
		u.b.WriteString("\n")
	}
	u.b.WriteString("[" + name + "]\n")
}

func (u *unitFile) set(key, value string) { u.b.WriteString(key + "=" + value + "\n") }

// UnitName is the systemd unit of a component.
func UnitName(c component.Component) string { return c.Binary() + ".service" }

// SystemdUnits renders one service per component and nodelet.target, in
// start order. It fails for a component without a sandbox profile or a
// declaration that does not order.
func SystemdUnits(s component.Set, o Options) ([]File, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	order, err := s.Order()
	if err != nil {
		return nil, err
	}
	if err := o.checkPaths(); err != nil {
		return nil, err
	}
	var files []File
	for _, c := range order {
		if len(c.Systemd.Why) == 0 {
			return nil, fmt.Errorf("units: component %s declares no systemd sandbox (internal/component)", c.Name)
		}
		files = append(files, File{Name: UnitName(c), Data: []byte(service(c, o))})
	}
	files = append(files, File{Name: Target, Data: []byte(target(order))})
	files = append(files, File{Name: ContainerdDropIn, Data: []byte(containerdDropIn(o.ContainerdVersion))})
	files = append(files, File{Name: SysusersFile, Data: []byte(sysusers(order))})
	return files, nil
}

// checkPaths: StateDirectory= and LogsDirectory= take paths under /var/lib
// and /var/log only; the cgroup root goes into a shell command.
func (o Options) checkPaths() error {
	for _, d := range []struct{ key, dir, base string }{
		{"state dir (node.stateDir)", o.StateDir, "/var/lib/"},
		{"pod logs dir (node.podLogsDir)", o.PodLogsDir, "/var/log/"},
	} {
		if rel, ok := strings.CutPrefix(path.Clean(d.dir), d.base); !ok || rel == "" || path.Clean(d.dir) != d.dir {
			return fmt.Errorf("units: %s %q must be a clean path below %s (systemd's StateDirectory= and LogsDirectory=)", d.key, d.dir, d.base)
		}
	}
	// It goes into a shell command: plain path characters only.
	r := o.CgroupRoot
	if r == "/" || !strings.HasPrefix(r, "/") || path.Clean(r) != r ||
		strings.IndexFunc(r, func(c rune) bool {
			return !unicode.IsLetter(c) && !unicode.IsDigit(c) && !strings.ContainsRune("/._-", c)
		}) >= 0 {
		return fmt.Errorf("units: cgroup root (runtime.cgroupRoot) %q must be a clean absolute path below / of letters, digits and . _ -", r)
	}
	if err := cgroups.ValidateDriver(o.CgroupDriver); err != nil {
		return fmt.Errorf("units: runtime.cgroupDriver: %w", err)
	}
	if o.ContainerdVersion != 1 && o.ContainerdVersion != 2 {
		return fmt.Errorf("units: runtime.containerdVersion %d must be 1 (Debian's containerd 1.6) or 2 (containerd 2.x)", o.ContainerdVersion)
	}
	// The systemd form turns "-" into "_", which a name must not hold
	// (the kubelet's NewCgroupName).
	if _, err := cgroups.NewName(nil, cgroups.ParseCgroupfs(r)...); o.CgroupDriver == cgroups.DriverSystemd && err != nil {
		return fmt.Errorf("units: cgroup root (runtime.cgroupRoot) %q under the systemd driver: %w", r, err)
	}
	return nil
}

// cgroupRootCommand makes root in every cgroup hierarchy: the unified one
// on cgroup v2, each controller's (and named) hierarchy on v1. Systemd
// reads "$$" as "$". With the systemd driver it makes root's slice
// directories (/kubepods.slice) on v1 only: there libcontainer's systemd
// manager (the kubelet's) makes a slice's directory itself in every
// hierarchy systemd leaves alone (cpuset, freezer, net_cls, ...: its
// LegacyManager.joinCgroups), while on v2 systemd makes them all.
func cgroupRootCommand(root, driver string) string {
	v2 := "mkdir -p /sys/fs/cgroup" + root
	if driver == cgroups.DriverSystemd {
		root, v2 = cgroups.ParseCgroupfs(root).ToSystemd(), ":"
	}
	rel := strings.TrimPrefix(root, "/")
	return "/bin/sh -c 'if [ -e /sys/fs/cgroup/cgroup.controllers ]; then " + v2 +
		"; else for h in /sys/fs/cgroup/*/; do if [ -e \"$${h}cgroup.procs\" ]; then mkdir -p \"$${h}" + rel + "\"; fi; done; fi'"
}

// stateRel is the state dir relative to /var/lib, as StateDirectory= takes it.
func (o Options) stateRel() string { return strings.TrimPrefix(o.StateDir, "/var/lib/") }

// sysusers declares, for systemd-sysusers, the group nodelet and one
// system user per component that runs as its own user.
func sysusers(order []component.Component) string {
	u := &unitFile{}
	u.comment(
		SysusersFile+": the users nodelet's daemons run as, one each, and",
		"their group. Install as /etc/sysusers.d/nodelet.conf, then run",
		"systemd-sysusers (scripts/setup.sh does both); `nodelet up` as root",
		"uses them with supervisor.componentUsers.",
		"",
	)
	u.comment(strings.Split(generatedBy, "\n")...)
	u.b.WriteString("\ng " + component.Group + " -\n")
	u.comment("", "Who may use containerd's CRI socket (its [grpc] gid), and who may read the",
		"node's certificates in the state dir's pki.")
	u.b.WriteString("g " + component.CRIGroup + " -\n")
	u.b.WriteString("g " + component.APIGroup + " -\n")
	for _, c := range order {
		if c.User() == "" {
			continue
		}
		// A GECOS field holds no ':'.
		u.b.WriteString(fmt.Sprintf("u %s - %q / -\n", c.User(), strings.ReplaceAll(c.Description, ":", "")))
		for _, g := range c.Groups() {
			u.b.WriteString(fmt.Sprintf("m %s %s\n", c.User(), g))
		}
	}
	u.comment("", "Root, each for the reason its unit gives:")
	for _, c := range order {
		if c.User() == "" {
			u.comment("  " + c.Binary())
		}
	}
	return u.b.String()
}

// ContainerdDropIn makes Debian's containerd.service run with the config
// scripts/setup.sh writes (socket /run/nodelet/containerd/containerd.sock,
// CNI conf dir and sandbox image that nodelet expects).
const ContainerdDropIn = "containerd.service.d/10-nodelet.conf"

const generatedBy = "Generated by `nodelet systemd-units` from internal/component, the declaration\n" +
	"`nodelet up` uses too; do not edit. Regenerate: go generate ./internal/tools/units/"

func header(u *unitFile, title string) {
	u.comment(title, "")
	u.comment(strings.Split(generatedBy, "\n")...)
	u.comment("Install: deploy/systemd/README.md.")
}

func service(c component.Component, o Options) string {
	sb := c.Systemd
	u := &unitFile{}
	header(u, UnitName(c)+": "+c.Description)
	u.section("Unit")
	u.set("Description", c.Description)
	if len(c.Requires) > 0 {
		u.comment(
			"Start after what the declaration says this daemon requires, once each has said",
			"READY=1, and pull it in. Wants=, not Requires= or BindsTo=: every daemon",
			"rides out a restart of the bus and of any other daemon (it reconnects and",
			"rebuilds its state from the buckets), so `systemctl restart` of one unit",
			"restarts that unit alone, as `nodelet up` does. Requires= would restart",
			"the dependents with it; BindsTo= would also stop them whenever the bus",
			"exits, and nothing would start them again.",
		)
		deps := make([]string, len(c.Requires))
		for i, r := range c.Requires {
			deps[i] = "nodelet-" + r + ".service"
		}
		u.set("Wants", strings.Join(deps, " "))
		u.set("After", strings.Join(deps, " "))
	}
	if c.NeedsCRI {
		u.comment("Talks to the container runtime over CRI.")
		u.set("Wants", "containerd.service")
		u.set("After", "containerd.service")
	}
	if c.NeedsAPI {
		u.comment("Talks to kube-apiserver when node.kubeconfig is set.")
		u.set("Wants", "network-online.target")
		u.set("After", "network-online.target")
	}
	u.comment("`systemctl stop|restart nodelet.target` reaches this unit too.")
	u.set("PartOf", Target)
	u.comment("A node agent keeps trying, as kubelet.service: no start rate limit.")
	u.set("StartLimitIntervalSec", "0")

	u.section("Service")
	if c.Name == "bus" {
		u.comment("READY=1 once every bucket and stream exists.")
	} else {
		u.comment("READY=1 once connected to the bus with its own credential.")
	}
	u.set("Type", "notify")
	u.set("NotifyAccess", "main")
	u.set("ExecStart", path.Join(o.BinDir, c.Binary())+" --config "+o.ConfigPath)
	if c.Name == "bus" {
		u.comment(
			"The bus pets the watchdog every half of WatchdogSec. A process stuck",
			"that long gets SIGABRT (a Go stack dump in the journal) and a restart.",
		)
	} else {
		u.comment(
			"The daemon pets the watchdog with every heartbeat: every",
			"bus.heartbeatInterval (5s) or half of WatchdogSec, whichever is shorter.",
			"A process stuck that long gets SIGABRT (a Go stack dump in the journal)",
			"and a restart.",
		)
	}
	u.set("WatchdogSec", seconds(o.WatchdogSec))
	u.comment("systemd 252 (Debian 12) has no restart back-off: a fixed delay, forever.")
	u.set("Restart", "always")
	u.set("RestartSec", seconds(o.RestartSec))
	u.comment("The agent must outlive the pods when memory runs out, as the kubelet.")
	u.set("OOMScoreAdjust", "-999")

	credDir := path.Join(o.StateDir, "credentials")
	if c.Name != "bus" {
		u.comment(
			"Its own bus credential, handed in by systemd ($CREDENTIALS_DIRECTORY,",
			"readable by its user alone); the others' seeds are hidden from it",
			"(below) unless it must share the host's mount namespace, and so are",
			"the other units' credentials under /run/credentials.",
		)
		u.set("LoadCredential", "bus-seed:"+path.Join(credDir, c.Name+".nk"))
	}
	u.comment("")
	u.comment("Identity.")
	if user := c.User(); user != "" {
		u.comment(
			"Its own user (deploy/systemd/"+SysusersFile+", made by systemd-sysusers)",
			"and the group of nodelet's daemons of their own users. It alone owns its",
			"parts of the state dir (group nodelet may reach its sockets), created if",
			"missing: "+strings.Join(append(append([]string{}, c.OwnDirs...), c.RunDir()+" (its lock and sockets)."), ", "),
		)
		u.set("User", user)
		u.set("Group", component.Group)
		var dirs []string
		for _, d := range append(append([]string{}, c.OwnDirs...), c.RunDir()) {
			dirs = append(dirs, path.Join(o.stateRel(), d))
		}
		u.set("StateDirectory", strings.Join(dirs, " "))
		mode := sb.StateMode
		if mode == "" {
			mode = "0750"
		}
		u.set("StateDirectoryMode", mode)
		if len(sb.Caps) > 0 {
			u.comment("The capabilities below, held by its own user.")
			u.set("AmbientCapabilities", strings.Join(sb.Caps, " "))
		}
	} else {
		u.comment("Runs as root.")
		u.comment(c.Root...)
	}
	if g := c.Groups(); len(g) > 0 {
		var why []string
		for _, n := range g {
			switch n {
			case component.CRIGroup:
				why = append(why, n+": containerd's CRI socket (its [grpc] gid)")
			case component.APIGroup:
				why = append(why, n+": the node's certificates in the state dir's "+component.SharedDir)
			}
		}
		u.comment("Groups: " + strings.Join(why, "; ") + ".")
		u.set("SupplementaryGroups", strings.Join(g, " "))
	}
	if sb.WritesShared {
		shared := path.Join(o.StateDir, component.SharedDir)
		u.comment(
			"It writes the node's certificates in "+shared+", shared with the other",
			"writer and readable by group "+component.APIGroup+": made (as root, before",
			"the sandbox applies) root's, that group's, setgid so what is written there",
			"keeps the group, 2770.",
		)
		u.set("ExecStartPre", "+/usr/bin/install -d -o root -g "+component.APIGroup+" -m 2770 "+shared)
		u.comment("\"-\": the command above runs in the unit's namespace too, before it made it.")
		u.set("ReadWritePaths", "-"+shared)
	}
	u.comment("")
	u.comment("Hardening.")
	u.comment(sb.Why...)
	u.set("NoNewPrivileges", "yes")
	if sb.PodLogs {
		if c.User() == "" {
			u.comment(o.PodLogsDir + " (node.podLogsDir), created if missing (root's), writable.")
			u.set("LogsDirectory", strings.TrimPrefix(o.PodLogsDir, "/var/log/"))
		} else {
			u.comment(o.PodLogsDir+" (node.podLogsDir), writable; root's (the runtime, root, writes it",
				"too): made if missing as root, before the sandbox applies.")
			u.set("ExecStartPre", "+/usr/bin/install -d -m 0755 "+o.PodLogsDir)
			u.set("ReadWritePaths", "-"+o.PodLogsDir)
		}
	}
	if sb.DevicePlugins {
		dp := path.Join(o.RootDir, "device-plugins")
		u.comment(dp+" (<node.rootDir>/device-plugins): kubelet.sock and the plugins'",
			"sockets, made if missing, writable.")
		u.set("ExecStartPre", "+/usr/bin/install -d -m 0750 "+dp)
		u.set("ReadWritePaths", "-"+dp)
		pr := path.Join(o.RootDir, "plugins_registry")
		u.comment(pr+" (<node.rootDir>/plugins_registry): DRA plugins' registration",
			"sockets, made if missing, writable.")
		u.set("ExecStartPre", "+/usr/bin/install -d -m 0750 "+pr)
		u.set("ReadWritePaths", "-"+pr)
	}
	if sb.CgroupRoot {
		if o.CgroupDriver == cgroups.DriverSystemd {
			u.comment(cgroups.ParseCgroupfs(o.CgroupRoot).ToSystemd()+" (runtime.cgroupRoot "+o.CgroupRoot+" as the systemd driver",
				"names it) in every cgroup v1 hierarchy, made as root before it starts:",
				"the systemd driver makes the slice's directory itself in the",
				"hierarchies systemd leaves alone (cpuset, freezer, ...), and a",
				"hierarchy's root is 0555, writable only with the CAP_DAC_OVERRIDE",
				"this unit drops. On cgroup v2 systemd makes every directory.")
		} else {
			u.comment(o.CgroupRoot+" (runtime.cgroupRoot) in every cgroup hierarchy (cgroup v2: the one),",
				"made as root before it starts: a hierarchy's root is 0555, writable only",
				"with the CAP_DAC_OVERRIDE this unit drops.")
		}
		u.set("ExecStartPre", "+"+cgroupRootCommand(o.CgroupRoot, o.CgroupDriver))
	}
	if !sb.HostMounts {
		u.comment("Read-only /usr, /etc and the rest, but for what it owns in the state")
		u.comment("dir (node.stateDir).")
		u.set("ProtectSystem", "strict")
		if c.User() == "" {
			u.comment("Root's: the state dir, created if missing, writable.")
			u.set("StateDirectory", o.stateRel())
		}
		if c.Name != "bus" {
			u.comment("Every component's seed lives here: it sees none of them.")
			u.set("InaccessiblePaths", "-"+credDir)
		}
		u.set("ProtectHome", "yes")
		u.set("PrivateTmp", "yes")
		if !sb.Devices {
			u.set("PrivateDevices", "yes")
		}
		u.set("ProtectKernelTunables", "yes")
		u.set("ProtectKernelModules", "yes")
		u.set("ProtectKernelLogs", "yes")
		u.set("ProtectControlGroups", "yes")
		u.set("ProtectClock", "yes")
		u.set("ProtectHostname", "yes")
		u.set("RestrictSUIDSGID", "yes")
	}
	if sb.Caps != nil {
		if len(sb.Caps) == 0 {
			u.comment("No capability at all.")
		}
		u.set("CapabilityBoundingSet", strings.Join(sb.Caps, " "))
	}
	if len(sb.DropCaps) > 0 {
		u.comment("Root's capabilities but these.")
		u.set("CapabilityBoundingSet", "~"+strings.Join(sb.DropCaps, " "))
	}
	families := "AF_UNIX AF_INET AF_INET6"
	if sb.Netlink {
		families += " AF_NETLINK"
	}
	u.set("RestrictAddressFamilies", families)
	if sb.LoopbackOnly {
		u.comment("Only the bus and unix sockets: no IP traffic beyond loopback (enforced")
		u.comment("on cgroup v2; cgroup v1 hosts ignore it with a warning).")
		u.set("IPAddressDeny", "any")
		u.set("IPAddressAllow", "localhost")
	}
	if sb.Private {
		u.comment("It creates files for nodelet alone.")
		u.set("UMask", "0077")
	}
	u.set("RestrictNamespaces", "yes")
	u.set("RestrictRealtime", "yes")
	u.set("LockPersonality", "yes")
	u.set("MemoryDenyWriteExecute", "yes")
	u.set("SystemCallArchitectures", "native")
	if len(sb.DenySyscalls) > 0 {
		u.set("SystemCallFilter", "~"+strings.Join(sb.DenySyscalls, " "))
	}
	return u.b.String()
}

func target(order []component.Component) string {
	u := &unitFile{}
	header(u, Target+": the nodelet node agent, every process of it")
	u.comment(
		"",
		"`systemctl enable --now nodelet.target` starts the bus, then each daemon",
		"once what it needs is ready; stop or restart it to stop or restart them",
		"all (pods keep running in containerd). Restart one part on its own with",
		"`systemctl restart nodelet-<name>`.",
	)
	u.section("Unit")
	u.set("Description", "nodelet node agent")
	names := make([]string, len(order))
	for i, c := range order {
		names[i] = UnitName(c)
	}
	u.set("Wants", strings.Join(names, " "))
	u.comment("Reached once every daemon is ready.")
	u.set("After", strings.Join(names, " "))
	u.section("Install")
	u.set("WantedBy", "multi-user.target")
	return u.b.String()
}

func containerdDropIn(major int) string {
	u := &unitFile{}
	binary, what, root := containerd.DefaultBinary2, "the containerd "+containerd.Version2+" scripts/setup.sh installs", containerd.DefaultRoot2
	if major == 1 {
		binary, what, root = containerd.DefaultBinary, "Debian's containerd 1.6", containerd.DefaultRoot
	}
	u.comment(
		"containerd.service.d/10-nodelet.conf: Debian's containerd.service running",
		what+" with the config",
		"scripts/setup.sh writes (/etc/nodelet/containerd/config.toml: socket",
		"/run/nodelet/containerd/containerd.sock, root "+root+",",
		"CNI conf dir /etc/nodelet/cni/net.d, sandbox image nodelet.local/pause:3.10),",
		"the one runtime.endpoint in deploy/nodelet.yaml points at.",
		"",
	)
	u.comment(strings.Split(generatedBy, "\n")...)
	u.section("Service")
	u.comment("An empty ExecStart= clears Debian's before setting ours.")
	u.set("ExecStart", "")
	u.set("ExecStart", binary+" --config /etc/nodelet/containerd/config.toml")
	return u.b.String()
}
