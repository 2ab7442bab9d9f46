package units

import (
	"fmt"
	"path"
	"strings"

	"github.com/nodelet/nodelet/internal/graph"
)

// sandbox is what one daemon may touch on the node; everything not granted
// here is denied by its unit. Each grant carries the reason, which goes into
// the unit as a comment.
type sandbox struct {
	// why explains the grants, one comment line per entry.
	why []string
	// hostMounts: the daemon must live in the host's mount namespace, so
	// none of the settings that create a private one may apply.
	hostMounts bool
	// devices keeps the host's /dev (no PrivateDevices=).
	devices bool
	// podLogs makes /var/log/pods writable (LogsDirectory=pods).
	podLogs bool
	// caps is the capability bounding set; nil keeps root's. A daemon of
	// its own user holds them as ambient capabilities.
	caps []string
	// netlink allows AF_NETLINK (listing the node's interfaces).
	netlink bool
	// loopbackOnly: the daemon talks to the bus (and unix sockets) only.
	loopbackOnly bool
	// private: every file it creates is for nodelet alone (UMask=0077).
	private bool
	// stateMode is the mode of the state dir parts a daemon of its own
	// user owns (StateDirectoryMode=); 0750 when empty: group nodelet may
	// reach the sockets in run/<name>.
	stateMode string
}

// sandboxes holds one entry per component of the graph; rendering fails for
// a component without one, so a new daemon cannot slip in unconfined.
var sandboxes = map[string]sandbox{
	"bus": {
		why: []string{
			"The bus needs its store and the seeds it makes under the state dir",
			"(both 0700, its own) and loopback TCP; nothing else.",
		},
		caps: []string{}, loopbackOnly: true, private: true,
		stateMode: "0700",
	},
	"sources": {
		why: []string{
			"Sources reads the static pod files (sources.staticPodPath), the node's",
			"kubeconfig (node.kubeconfig) with the key it names and the client",
			"certificate status renews in the state dir's pki, all often root's and",
			"0600 (as kubeadm writes them): CAP_DAC_READ_SEARCH reads them, and",
			"nothing else can it write. It fetches the manifest URL and talks to",
			"kube-apiserver.",
		},
		caps: []string{"CAP_DAC_READ_SEARCH"}, private: true,
	},
	"admission": {
		why: []string{
			"Admission reads the node's capacity from /proc and /sys and decides on",
			"the buckets, reading claims, volumes and CSINode from kube-apiserver",
			"for CSI attach limits with the node's kubeconfig and client",
			"certificate (root's and 0600, as for sources: CAP_DAC_READ_SEARCH);",
			"it writes nothing but its own run directory.",
		},
		caps: []string{"CAP_DAC_READ_SEARCH"}, private: true,
	},
	"prober": {
		why: []string{
			"The prober probes pods over TCP, HTTP and gRPC (exec probes go through",
			"CRI) and looks up the node's address over netlink.",
		},
		caps:    []string{},
		netlink: true,
		private: true,
	},
	"status": {
		why: []string{
			"Status reads the node's hardware and filesystem capacity through",
			"cAdvisor (/proc and /sys read-only; /dev stays, cAdvisor maps",
			"filesystems to block devices) and looks up the node's addresses over",
			"netlink.",
		},
		devices: true,
		caps:    []string{},
		netlink: true,
		private: true,
	},
	"server": {
		why: []string{
			"The server serves the kubelet API on server.port (TCP, any address)",
			"and the read-only port when set, reads container logs under",
			"/var/log/pods and /var/log for /logs/ (read-only here), proxies",
			"streams to containerd's loopback streaming server, reads the node's",
			"usage through procfs and cAdvisor (/dev stays, cAdvisor maps",
			"filesystems to block devices), keeps its serving certificate in the",
			"state dir and looks up the node's addresses over netlink.",
		},
		devices: true,
		caps:    []string{},
		netlink: true,
		private: true,
	},
	"gc": {
		why: []string{
			"GC rotates and removes container logs under /var/log/pods",
			"(LogsDirectory=pods makes it writable), measures emptyDir volumes",
			"whose files belong to any user and removes pod log directories",
			"(CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE), and reads /proc and the root",
			"memory cgroup for the eviction signals.",
		},
		podLogs:      true,
		caps:         []string{"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"},
		loopbackOnly: true,
	},
	"runtime": {
		why: []string{
			"The runtime mounts tmpfs emptyDir volumes that containerd, outside this",
			"unit, bind-mounts into containers, so it must stay in the host's mount",
			"namespace: ProtectSystem=, ProtectHome=, PrivateTmp=, PrivateDevices=,",
			"ReadWritePaths=, ProtectKernel*= and ProtectControlGroups= all make a",
			"private one and cannot apply. It writes the state dir (volumes, /etc/hosts",
			"and termination message files), /var/log/pods and the CNI conf dir",
			"(runtime.cniConfDir), removes pod cgroups under /sys/fs/cgroup, mounts",
			"(CAP_SYS_ADMIN) and prepares volumes for any user: it keeps root's",
			"capabilities, as the kubelet does. What still applies: no new",
			"privileges, no exotic sockets, no namespaces, no W+X memory.",
		},
		hostMounts: true,
		netlink:    true,
	},
}

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
func UnitName(c graph.Component) string { return c.Binary() + ".service" }

// SystemdUnits renders one service per component and nodelet.target, in
// start order. It fails for a component without a sandbox profile or a
// graph that does not order.
func SystemdUnits(cs []graph.Component, o Options) ([]File, error) {
	order, err := graph.Order(cs)
	if err != nil {
		return nil, err
	}
	if err := o.checkDirs(); err != nil {
		return nil, err
	}
	var files []File
	for _, c := range order {
		sb, ok := sandboxes[c.Name]
		if !ok {
			return nil, fmt.Errorf("units: component %s has no sandbox profile in internal/tools/units", c.Name)
		}
		files = append(files, File{Name: UnitName(c), Data: []byte(service(c, sb, o))})
	}
	files = append(files, File{Name: Target, Data: []byte(target(order))})
	files = append(files, File{Name: ContainerdDropIn, Data: []byte(containerdDropIn())})
	files = append(files, File{Name: SysusersFile, Data: []byte(sysusers(order))})
	return files, nil
}

// checkDirs: StateDirectory= and LogsDirectory= take paths under /var/lib
// and /var/log only.
func (o Options) checkDirs() error {
	for _, d := range []struct{ key, dir, base string }{
		{"state dir (node.stateDir)", o.StateDir, "/var/lib/"},
		{"pod logs dir (node.podLogsDir)", o.PodLogsDir, "/var/log/"},
	} {
		if rel, ok := strings.CutPrefix(path.Clean(d.dir), d.base); !ok || rel == "" || path.Clean(d.dir) != d.dir {
			return fmt.Errorf("units: %s %q must be a clean path below %s (systemd's StateDirectory= and LogsDirectory=)", d.key, d.dir, d.base)
		}
	}
	return nil
}

// stateRel is the state dir relative to /var/lib, as StateDirectory= takes it.
func (o Options) stateRel() string { return strings.TrimPrefix(o.StateDir, "/var/lib/") }

// sysusers declares, for systemd-sysusers, the group nodelet and one
// system user per component that runs as its own user.
func sysusers(order []graph.Component) string {
	u := &unitFile{}
	u.comment(
		SysusersFile+": the users nodelet's daemons run as, one each, and",
		"their group. Install as /etc/sysusers.d/nodelet.conf, then run",
		"systemd-sysusers (scripts/setup.sh does both); `nodelet up` as root",
		"uses them with supervisor.componentUsers.",
		"",
	)
	u.comment(strings.Split(generatedBy, "\n")...)
	u.b.WriteString("\ng " + graph.Group + " -\n")
	for _, c := range order {
		if c.User() == "" {
			continue
		}
		u.b.WriteString(fmt.Sprintf("u %s - %q / -\n", c.User(), c.Description))
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

const generatedBy = "Generated by `nodelet systemd-units` from internal/graph, the dependency graph\n" +
	"`nodelet up` uses; do not edit. Regenerate: go generate ./internal/tools/units/"

func header(u *unitFile, title string) {
	u.comment(title, "")
	u.comment(strings.Split(generatedBy, "\n")...)
	u.comment("Install: deploy/systemd/README.md.")
}

func service(c graph.Component, sb sandbox, o Options) string {
	u := &unitFile{}
	header(u, UnitName(c)+": "+c.Description)
	u.section("Unit")
	u.set("Description", c.Description)
	if len(c.Requires) > 0 {
		u.comment(
			"Start after what the graph says this daemon requires, once each has said",
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
		u.set("Group", graph.Group)
		var dirs []string
		for _, d := range append(append([]string{}, c.OwnDirs...), c.RunDir()) {
			dirs = append(dirs, path.Join(o.stateRel(), d))
		}
		u.set("StateDirectory", strings.Join(dirs, " "))
		mode := sb.stateMode
		if mode == "" {
			mode = "0750"
		}
		u.set("StateDirectoryMode", mode)
		if len(sb.caps) > 0 {
			u.comment("The capabilities below, held by its own user.")
			u.set("AmbientCapabilities", strings.Join(sb.caps, " "))
		}
	} else {
		u.comment("Runs as root.")
		u.comment(c.Root...)
	}
	u.comment("")
	u.comment("Hardening.")
	u.comment(sb.why...)
	u.set("NoNewPrivileges", "yes")
	if !sb.hostMounts {
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
		if sb.podLogs {
			u.comment(o.PodLogsDir + " (node.podLogsDir), created if missing, writable.")
			u.set("LogsDirectory", strings.TrimPrefix(o.PodLogsDir, "/var/log/"))
		}
		u.set("ProtectHome", "yes")
		u.set("PrivateTmp", "yes")
		if !sb.devices {
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
	if sb.caps != nil {
		if len(sb.caps) == 0 {
			u.comment("No capability at all.")
		}
		u.set("CapabilityBoundingSet", strings.Join(sb.caps, " "))
	}
	families := "AF_UNIX AF_INET AF_INET6"
	if sb.netlink {
		families += " AF_NETLINK"
	}
	u.set("RestrictAddressFamilies", families)
	if sb.loopbackOnly {
		u.comment("Only the bus and unix sockets: no IP traffic beyond loopback (enforced")
		u.comment("on cgroup v2; cgroup v1 hosts ignore it with a warning).")
		u.set("IPAddressDeny", "any")
		u.set("IPAddressAllow", "localhost")
	}
	if sb.private {
		u.comment("It creates files for nodelet alone.")
		u.set("UMask", "0077")
	}
	u.set("RestrictNamespaces", "yes")
	u.set("RestrictRealtime", "yes")
	u.set("LockPersonality", "yes")
	u.set("MemoryDenyWriteExecute", "yes")
	u.set("SystemCallArchitectures", "native")
	return u.b.String()
}

func target(order []graph.Component) string {
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

func containerdDropIn() string {
	u := &unitFile{}
	u.comment(
		"containerd.service.d/10-nodelet.conf: Debian's containerd with the config",
		"scripts/setup.sh writes (/etc/nodelet/containerd/config.toml: socket",
		"/run/nodelet/containerd/containerd.sock, root /var/lib/nodelet/containerd,",
		"CNI conf dir /etc/nodelet/cni/net.d, sandbox image nodelet.local/pause:3.10),",
		"the one runtime.endpoint in deploy/nodelet.yaml points at.",
		"",
	)
	u.comment(strings.Split(generatedBy, "\n")...)
	u.section("Service")
	u.comment("An empty ExecStart= clears Debian's before setting ours.")
	u.set("ExecStart", "")
	u.set("ExecStart", "/usr/bin/containerd --config /etc/nodelet/containerd/config.toml")
	return u.b.String()
}
