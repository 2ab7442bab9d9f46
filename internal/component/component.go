// Package component declares every part of nodelet once: for each
// component its name and binary, what it requires before it starts,
// whether it talks to CRI and kube-apiserver, the buckets it writes and
// reads and the subjects it publishes and subscribes to, the OS user it
// runs as (or why it stays root), its systemd sandbox and its compose
// container. Everything else is derived from this declaration:
//
//   - the supervisor's start order (Set.Order, internal/supervisor);
//   - the bus's accounts and permissions (bus derives its matrix from a Set);
//   - the systemd units and sysusers.d file, and docker-compose.yml
//     (internal/tools/units renders a Set);
//   - each daemon's start-up checks (internal/daemon looks its component up).
//
// Changing what a component needs is one edit in declared.go; the
// generated files' staleness tests then fail until they are regenerated.
package component

import (
	"fmt"
	"slices"
	"sort"
)

// Components that hold a bus credential or run as a process: the eight
// daemons, the bus itself, the supervisor and the read-only tap.
const (
	Bus        = "bus"
	Sources    = "sources"
	Admission  = "admission"
	Runtime    = "runtime"
	Prober     = "prober"
	Status     = "status"
	GC         = "gc"
	Server     = "server"
	Devices    = "devices"
	Supervisor = "supervisor"
	Tap        = "tap"
)

// Buckets. Every bucket has exactly one writer: the component whose
// Writes names it.
const (
	BucketDesired   = "nodelet_v1_pods_desired"   // key pod UID → schemas.PodDesired
	BucketSources   = "nodelet_v1_sources"        // key "ready" → schemas.SourcesReady
	BucketAdmission = "nodelet_v1_pods_admission" // key pod UID → schemas.AdmissionVerdict
	BucketObserved  = "nodelet_v1_pods_observed"  // key pod UID → schemas.PodObserved
	BucketRuntime   = "nodelet_v1_runtime"        // key "state" → schemas.RuntimeState, "volumestats" → schemas.PodVolumeStats, "volumesinuse" → schemas.VolumesInUse
	BucketProbes    = "nodelet_v1_probes"         // key <uid>.<container>.<kind> → schemas.ProbeResult
	BucketStatus    = "nodelet_v1_pods_status"    // key pod UID → schemas.PodStatusRecord
	BucketNode      = "nodelet_v1_node"           // key "node" → schemas.NodeRecord
	BucketPressure  = "nodelet_v1_pressure"       // key "node" → schemas.NodePressure
	BucketEvictions = "nodelet_v1_evictions"      // key pod UID → schemas.PodEviction
	BucketImages    = "nodelet_v1_images"         // key image ID (sanitised) → schemas.ImageRecord
	BucketDevices   = "nodelet_v1_devices"        // key "resources" → schemas.DeviceResources, "pods.<uid>" → schemas.PodDevices, "claims.<uid>" → schemas.PodClaims, "drahealth" → schemas.DRAHealth
)

// StatusEventsDurable is status's durable consumer of (its copy of) the
// events stream, through which it posts every event to the API once.
const StatusEventsDurable = "nodelet-status-events"

// Groups of the daemons that run as users of their own.
const (
	// Group is the primary group of every daemon of its own user; it may
	// reach their sockets.
	Group = "nodelet"
	// CRIGroup may use containerd's CRI socket: containerd's [grpc] gid
	// (internal/containerd, scripts/setup.sh) gives it the socket, and the
	// daemons of their own users that talk to CRI hold it as a
	// supplementary group.
	CRIGroup = "nodelet-cri"
	// APIGroup may read the node's certificates in the state dir's pki
	// (SharedDir, setgid: what status and the server write there is
	// group-readable): every daemon that talks to kube-apiserver holds it,
	// the root runtime too, which has no capability to pass file modes.
	APIGroup = "nodelet-api"
)

// SharedDir is the part of the state dir more than one daemon of its own
// user writes: the node's certificates (the kubelet's --cert-dir), made
// root's, group APIGroup, setgid, 2770 by the units that write it.
const SharedDir = "pki"

// Bucket is a bucket a component writes, and how much history it keeps.
type Bucket struct {
	Name    string
	History uint8
}

// Component is one part of nodelet.
type Component struct {
	// Name is the short name: bus, sources, ...; a process's binary is
	// nodelet-<Name>.
	Name string
	// Description is one line for units and listings.
	Description string
	// Process: it runs as a process of its own (the bus and the daemons),
	// started by the supervisor, the systemd units and compose. The
	// supervisor and tap only hold a credential.
	Process bool
	// Requires lists the components that must be ready before this starts.
	Requires []string
	// NeedsCRI: it talks to the container runtime. Its start-up check
	// requires a runtime that answers, its unit waits for containerd.
	NeedsCRI bool
	// NeedsAPI: it talks to kube-apiserver when one is configured.
	NeedsAPI bool

	// Writes are the buckets it alone writes.
	Writes []Bucket
	// Reads are the buckets it reads (watches or gets), its own included
	// when it reconciles from them after a restart.
	Reads []string
	// ReadsEverything: every bucket and the events stream, read-only, and
	// every write, event and heartbeat live (tap).
	ReadsEverything bool
	// EventsDurable is the durable consumer through which it consumes the
	// events stream (on its own copy of it), "" when it does not.
	EventsDurable string
	// Events: it publishes lifecycle events on events.<Name>.>.
	Events bool
	// Heartbeats: it publishes heartbeats on health.<Name>.
	Heartbeats bool
	// ReadsHealth: it subscribes to everyone's heartbeats.
	ReadsHealth bool

	// Root says why the component must run as root. Empty: it runs as its
	// own user, User(), in Group.
	Root []string
	// OwnDirs are the parts of the state dir (relative to it) a component
	// of its own user owns besides RunDir.
	OwnDirs []string
	// MemoryLimit is its process's default soft memory limit (the Go
	// runtime's GOMEMLIMIT; config memory.limits overrides it): well above
	// what it uses at maxPods, so that it only bounds runaway growth.
	MemoryLimit string

	// Systemd is its unit's sandbox.
	Systemd Systemd
	// Compose is its docker-compose service.
	Compose Compose
}

// Systemd is what one daemon may touch on the node under its unit;
// everything not granted is denied. Why carries the reasons, which go into
// the unit as comments.
type Systemd struct {
	// Why explains the grants, one comment line per entry.
	Why []string
	// HostMounts: the daemon must live in the host's mount namespace, so
	// none of the settings that create a private one may apply.
	HostMounts bool
	// Devices keeps the host's /dev (no PrivateDevices=).
	Devices bool
	// PodLogs makes the pod logs dir writable (LogsDirectory=).
	PodLogs bool
	// DevicePlugins makes <node.rootDir>/device-plugins, where device
	// plugins register and serve, and <node.rootDir>/plugins_registry,
	// where DRA plugins register, writable (made if missing).
	DevicePlugins bool
	// CgroupRoot: the daemon makes cgroups under runtime.cgroupRoot, which
	// the unit creates first, as root, in every hierarchy: a hierarchy's
	// own root directory is 0555, writable only with CAP_DAC_OVERRIDE.
	CgroupRoot bool
	// Caps is the capability bounding set; nil keeps root's. A daemon of
	// its own user holds them as ambient capabilities.
	Caps []string
	// DropCaps are taken out of root's bounding set (with Caps nil).
	DropCaps []string
	// DenySyscalls are system call groups denied (SystemCallFilter=~).
	DenySyscalls []string
	// WritesShared: it writes SharedDir (the node's certificates).
	WritesShared bool
	// Netlink allows AF_NETLINK (listing the node's interfaces).
	Netlink bool
	// LoopbackOnly: the daemon talks to the bus (and unix sockets) only.
	LoopbackOnly bool
	// Private: every file it creates is for nodelet alone (UMask=0077).
	Private bool
	// StateMode is the mode of the state dir parts a daemon of its own
	// user owns (StateDirectoryMode=); 0750 when empty.
	StateMode string
}

// Compose is what one compose service needs beyond the bus, the state dir
// and the configuration, with the reason.
type Compose struct {
	Why []string
	// CapAdd are capabilities beyond the engine's default set (compose
	// cap_add, names without CAP_), with AppArmor unconfined (Docker's
	// default profile denies mount(2) whatever the capabilities). Not
	// `privileged`: that gives every capability the engine knows of, and
	// Debian's Docker 20.10 then fails to start the container where the
	// host's bounding set lacks one (runc: "unable to apply caps"). Default:
	// none (the engine's defaults, confined).
	CapAdd []string
	// CgroupHost shows the host's cgroup tree instead of the container's.
	CgroupHost bool
	// StateDirShared makes the state dir mount rshared, so mounts made in
	// it propagate to the host (and to containerd).
	StateDirShared bool
	Volumes        []string
}

// Binary is the executable name.
func (c Component) Binary() string { return "nodelet-" + c.Name }

// User is the OS user the component runs as, or "" for root.
func (c Component) User() string {
	if len(c.Root) > 0 {
		return ""
	}
	return "nodelet-" + c.Name
}

// Groups are the supplementary groups of a process: CRIGroup when it
// talks to CRI as a user of its own (root owns the socket), APIGroup when
// it talks to kube-apiserver.
func (c Component) Groups() []string {
	var g []string
	if c.User() != "" && c.NeedsCRI {
		g = append(g, CRIGroup)
	}
	if c.NeedsAPI {
		g = append(g, APIGroup)
	}
	return g
}

// RunDir is the component's own directory under the state dir, relative
// to it: its lock file and its sockets (internal/daemon).
func (c Component) RunDir() string { return "run/" + c.Name }

// Credential tells whether the component holds a bus seed on disk:
// everyone but the bus, whose admin key lives in its memory.
func (c Component) Credential() bool { return c.Name != Bus }

// Set is a declaration: every component. Declared is nodelet's; tests
// derive from modified copies.
type Set []Component

// Clone returns a deep enough copy to change one component's lists.
func (s Set) Clone() Set {
	out := make(Set, len(s))
	for i, c := range s {
		c.Requires = slices.Clone(c.Requires)
		c.Writes = slices.Clone(c.Writes)
		c.Reads = slices.Clone(c.Reads)
		out[i] = c
	}
	return out
}

// Get returns the named component.
func (s Set) Get(name string) (Component, bool) {
	for _, c := range s {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// Names lists every component's name in declaration order.
func (s Set) Names() []string {
	var out []string
	for _, c := range s {
		out = append(out, c.Name)
	}
	return out
}

// Processes lists the components that run as processes, in declaration
// order.
func (s Set) Processes() Set {
	var out Set
	for _, c := range s {
		if c.Process {
			out = append(out, c)
		}
	}
	return out
}

// Daemons lists the names of the processes but the bus, in start order.
func (s Set) Daemons() []string {
	var out []string
	for _, c := range s.MustOrder() {
		if c.Name != Bus {
			out = append(out, c.Name)
		}
	}
	return out
}

// BucketOwner is a bucket with its single writer.
type BucketOwner struct {
	Name    string
	Owner   string
	History uint8
}

// Buckets lists every bucket with its writer, in declaration order.
func (s Set) Buckets() []BucketOwner {
	var out []BucketOwner
	for _, c := range s {
		for _, b := range c.Writes {
			out = append(out, BucketOwner{Name: b.Name, Owner: c.Name, History: b.History})
		}
	}
	return out
}

// Check finds what cannot be: a bucket with two writers, a read of a
// bucket nobody writes, a requirement that is not a process, a cycle.
func (s Set) Check() error {
	owner := map[string]string{}
	for _, b := range s.Buckets() {
		if o, ok := owner[b.Name]; ok {
			return fmt.Errorf("component: bucket %s has two writers, %s and %s", b.Name, o, b.Owner)
		}
		owner[b.Name] = b.Owner
	}
	for _, c := range s {
		for _, r := range c.Reads {
			if _, ok := owner[r]; !ok {
				return fmt.Errorf("component: %s reads bucket %s, which no component writes", c.Name, r)
			}
		}
	}
	_, err := s.Order()
	return err
}

// Order returns the processes in a start order that respects Requires;
// ties keep the declaration order. It fails on unknown names and cycles.
func (s Set) Order() ([]Component, error) {
	cs := s.Processes()
	index := map[string]int{}
	for i, c := range cs {
		index[c.Name] = i
	}
	for _, c := range cs {
		for _, r := range c.Requires {
			if _, ok := index[r]; !ok {
				return nil, fmt.Errorf("component: %s requires unknown component %s", c.Name, r)
			}
		}
	}
	var out []Component
	done := map[string]bool{}
	for len(out) < len(cs) {
		var ready []int
		for i, c := range cs {
			if done[c.Name] {
				continue
			}
			ok := true
			for _, r := range c.Requires {
				ok = ok && done[r]
			}
			if ok {
				ready = append(ready, i)
			}
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("component: dependency cycle among the remaining components")
		}
		sort.Ints(ready)
		c := cs[ready[0]]
		done[c.Name] = true
		out = append(out, c)
	}
	return out, nil
}

// MustOrder is Order for a declaration known to be valid.
func (s Set) MustOrder() []Component {
	o, err := s.Order()
	if err != nil {
		panic(err)
	}
	return o
}

// Get returns the named component of Declared.
func Get(name string) (Component, bool) { return Declared.Get(name) }

// StartOrder is Declared's processes in start order.
func StartOrder() []Component { return Declared.MustOrder() }
