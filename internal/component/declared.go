package component

// Host paths the compose services share with the node. They are the
// node's own paths, not volumes: containerd runs on the host and mounts
// what the runtime prepares there (emptyDirs, /etc/hosts, logs), so the
// runtime must see them where containerd does. They match
// deploy/nodelet.yaml, the configuration the services run with (a test in
// internal/tools/units checks it).
const (
	ComposeConfig    = "./deploy/nodelet.yaml"
	ComposeStateDir  = "/var/lib/nodelet"
	ComposePodLogs   = "/var/log/pods"
	ComposeCRIDir    = "/run/nodelet/containerd"
	ComposeCNIConf   = "/etc/nodelet/cni/net.d"
	ComposeManifests = "/etc/nodelet/manifests"
	// ComposeDevicePlugins is <node.rootDir>/device-plugins.
	ComposeDevicePlugins = "/var/lib/kubelet/device-plugins"
	// ComposePluginsRegistry is <node.rootDir>/plugins_registry.
	ComposePluginsRegistry = "/var/lib/kubelet/plugins_registry"
	// ComposePlugins is <node.rootDir>/plugins (the DRA drivers' sockets).
	ComposePlugins = "/var/lib/kubelet/plugins"
)

// Declared is nodelet: every component, once. Order here does not matter
// for starting (Set.Order computes it from Requires); it is the order of
// listings.
var Declared = Set{
	{
		Name: Bus, Process: true, Description: "nodelet bus (embedded NATS with JetStream)",
		MemoryLimit: "128Mi",
		OwnDirs:     []string{"bus", "credentials"},
		Systemd: Systemd{
			Why: []string{
				"The bus needs its store and the seeds it makes under the state dir",
				"(both 0700, its own) and loopback TCP; nothing else.",
			},
			Caps: []string{}, LoopbackOnly: true, Private: true,
			StateMode: "0700",
		},
	},
	{
		Name: Sources, Process: true, Description: "nodelet pod sources (static files, URL, API server)",
		MemoryLimit: "64Mi",
		Requires:    []string{Bus}, NeedsAPI: true,
		Writes: []Bucket{{BucketDesired, 5}, {BucketSources, 1}},
		Reads:  []string{BucketDesired, BucketSources},
		Events: true, Heartbeats: true,
		Systemd: Systemd{
			Why: []string{
				"Sources reads the static pod files (sources.staticPodPath), the node's",
				"kubeconfig (node.kubeconfig) with the key it names and the client",
				"certificate status renews in the state dir's pki, all often root's and",
				"0600 (as kubeadm writes them): CAP_DAC_READ_SEARCH reads them, and",
				"nothing else can it write. It fetches the manifest URL and talks to",
				"kube-apiserver.",
			},
			Caps: []string{"CAP_DAC_READ_SEARCH"}, Private: true,
		},
		Compose: Compose{
			Why:     []string{"Reads the static pods from the host's manifest dir."},
			Volumes: []string{ComposeManifests + ":" + ComposeManifests + ":ro"},
		},
	},
	{
		Name: Admission, Process: true, Description: "nodelet pod admission",
		MemoryLimit: "48Mi",
		Requires:    []string{Bus, Sources, Devices}, NeedsAPI: true,
		Writes: []Bucket{{BucketAdmission, 5}},
		Reads:  []string{BucketDesired, BucketAdmission, BucketObserved, BucketPressure, BucketRuntime, BucketDevices},
		Events: true, Heartbeats: true,
		Systemd: Systemd{
			Why: []string{
				"Admission reads the node's capacity from /proc and /sys and decides on",
				"the buckets, reading claims, volumes and CSINode from kube-apiserver",
				"for CSI attach limits with the node's kubeconfig and client",
				"certificate (root's and 0600, as for sources: CAP_DAC_READ_SEARCH);",
				"it writes nothing but its own run directory.",
			},
			Caps: []string{"CAP_DAC_READ_SEARCH"}, Private: true,
		},
	},
	{
		Name: Devices, Process: true, Description: "nodelet device plugins and DRA (the kubelet's device and DRA managers)",
		MemoryLimit: "48Mi",
		Requires:    []string{Bus, Sources}, NeedsAPI: true,
		Writes: []Bucket{{BucketDevices, 5}},
		Reads:  []string{BucketDesired, BucketSources, BucketAdmission, BucketObserved, BucketDevices},
		Events: true, Heartbeats: true,
		Systemd: Systemd{
			Why: []string{
				"Devices talks to the device plugins over unix sockets in",
				"<node.rootDir>/device-plugins (root's, writable here, made if",
				"missing), where it serves kubelet.sock, removes stale sockets and",
				"keeps its checkpoint, and to DRA drivers through",
				"<node.rootDir>/plugins_registry and <node.rootDir>/plugins (writable",
				"here, made if missing); it dials each plugin's socket, which plugins",
				"(root in their containers) create root's and not writable by others:",
				"its own user reaches them with CAP_DAC_OVERRIDE alone (root with it",
				"would read every unit's seed). It talks to kube-apiserver",
				"(ResourceClaims) with the node's kubeconfig and client certificate",
				"(group " + APIGroup + ") and reads no other file.",
			},
			DevicePlugins: true,
			Caps:          []string{"CAP_DAC_OVERRIDE"},
			Private:       true,
		},
		Compose: Compose{
			Why: []string{"Device plugins on the host register on the host's device-plugins directory,",
				"DRA drivers in its plugins_registry and serve in its plugins directory."},
			Volumes: []string{ComposeDevicePlugins + ":" + ComposeDevicePlugins,
				ComposePluginsRegistry + ":" + ComposePluginsRegistry, ComposePlugins + ":" + ComposePlugins},
		},
	},
	{
		Name: Runtime, Process: true, Description: "nodelet pod runtime over CRI",
		MemoryLimit: "96Mi",
		Requires:    []string{Bus, Admission}, NeedsCRI: true, NeedsAPI: true,
		Writes: []Bucket{{BucketObserved, 10}, {BucketRuntime, 5}},
		Reads: []string{BucketDesired, BucketSources, BucketAdmission, BucketObserved, BucketRuntime,
			BucketProbes, BucketEvictions, BucketStatus, BucketDevices},
		Events: true, Heartbeats: true,
		Root: []string{
			"It creates sandboxes and containers over CRI, mounts volumes and",
			"prepares them for any user (chown, chmod), and makes, limits and",
			"removes pod cgroups, as the kubelet does. It holds neither CAP_DAC_OVERRIDE nor",
			"CAP_DAC_READ_SEARCH: the other daemons' seeds, their users' own",
			"(0500 directories under /run/credentials, the bus's 0700 directory on",
			"disk), stay closed to it; it reads the node's certificates through",
			"group " + APIGroup + ". A directory a container left in a volume with a",
			"mode that shuts others out (0700 of another uid) is taken over (chown,",
			"chmod) before it is removed with the pod (bus/doc.go, known limits).",
		},
		Systemd: Systemd{
			Why: []string{
				"The runtime mounts tmpfs emptyDir volumes that containerd, outside this",
				"unit, bind-mounts into containers, so it must stay in the host's mount",
				"namespace: ProtectSystem=, ProtectHome=, PrivateTmp=, PrivateDevices=,",
				"ReadWritePaths=, ProtectKernel*= and ProtectControlGroups= all make a",
				"private one and cannot apply. It writes the state dir (volumes, /etc/hosts",
				"and termination message files), /var/log/pods and the CNI conf dir",
				"(runtime.cniConfDir), makes and removes pod cgroups under /sys/fs/cgroup, mounts",
				"(CAP_SYS_ADMIN) and prepares volumes for any user: it keeps root's",
				"capabilities, as the kubelet does, but for passing file modes",
				"(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: every file it must reach is",
				"root's or group " + APIGroup + "'s, and the one directory it cannot",
				"make without them, its cgroup root, the unit makes before it starts).",
				"What still applies: no new privileges, no exotic sockets, no",
				"namespaces, no W+X memory.",
			},
			HostMounts: true,
			Netlink:    true,
			CgroupRoot: true,
			DropCaps:   []string{"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH"},
		},
		Compose: Compose{
			Why: []string{
				"CAP_SYS_ADMIN and AppArmor unconfined (mounts), with the host's cgroups",
				"and a shared state dir: it mounts tmpfs emptyDirs that containerd on the",
				"host must see (the host's /var/lib/nodelet must be on a shared mount, as",
				"/ is under systemd), writes pod logs and the CNI conflist containerd",
				"reads, validates the host's CNI plugins and removes pod cgroups. hostPath",
				"volumes are checked inside this container; for those, use deploy/systemd.",
			},
			CapAdd: []string{"SYS_ADMIN"}, CgroupHost: true, StateDirShared: true,
			Volumes: []string{
				ComposePodLogs + ":" + ComposePodLogs,
				ComposeCNIConf + ":" + ComposeCNIConf,
				"/usr/lib/cni:/usr/lib/cni:ro",
				"/opt/cni/bin:/opt/cni/bin:ro",
				"/sys/fs/cgroup:/sys/fs/cgroup",
			},
		},
	},
	{
		Name: Prober, Process: true, Description: "nodelet probes",
		MemoryLimit: "48Mi",
		Requires:    []string{Bus, Runtime}, NeedsCRI: true,
		Writes: []Bucket{{BucketProbes, 5}},
		Reads:  []string{BucketDesired, BucketObserved, BucketProbes},
		Events: true, Heartbeats: true,
		Systemd: Systemd{
			Why: []string{
				"The prober probes pods over TCP, HTTP and gRPC (exec probes go through",
				"CRI, whose socket group " + CRIGroup + " it holds) and looks up the",
				"node's address over netlink.",
			},
			Caps:    []string{},
			Netlink: true,
			Private: true,
		},
	},
	{
		Name: Status, Process: true, Description: "nodelet pod and node status, Lease and events",
		MemoryLimit: "64Mi",
		Requires:    []string{Bus, Runtime}, NeedsCRI: true, NeedsAPI: true,
		Writes: []Bucket{{BucketStatus, 10}, {BucketNode, 1}},
		Reads: []string{BucketDesired, BucketAdmission, BucketObserved, BucketRuntime,
			BucketProbes, BucketStatus, BucketNode, BucketPressure, BucketEvictions, BucketDevices},
		EventsDurable: StatusEventsDurable,
		Events:        true, Heartbeats: true,
		Systemd: Systemd{
			Why: []string{
				"Status reads the node's hardware and filesystem capacity through",
				"cAdvisor (/proc and /sys read-only; /dev stays, cAdvisor maps",
				"filesystems to block devices), the runtime's version and the node's",
				"images over CRI (group " + CRIGroup + "), and looks up the node's",
				"addresses over netlink. It reads the node's kubeconfig (root's and",
				"0600, as kubeadm writes it: CAP_DAC_READ_SEARCH) and renews the",
				"client certificate in the state dir's pki.",
			},
			Devices:      true,
			Caps:         []string{"CAP_DAC_READ_SEARCH"},
			WritesShared: true,
			Netlink:      true,
			Private:      true,
		},
	},
	{
		Name: Server, Process: true, Description: "nodelet kubelet API (logs, exec, attach, port-forward, stats, metrics, read-only port) on :10250",
		MemoryLimit: "64Mi",
		Requires:    []string{Bus, Runtime}, NeedsCRI: true, NeedsAPI: true,
		// The kubelet API owns no bucket: it finds pods by namespace and
		// name in the desired pods, and serves /pods and /healthz from the
		// statuses and the runtime's state.
		Reads:  []string{BucketDesired, BucketRuntime, BucketStatus},
		Events: true, Heartbeats: true, ReadsHealth: true,
		Systemd: Systemd{
			Why: []string{
				"The server serves the kubelet API on server.port (TCP, any address)",
				"and the read-only port when set, reads container logs under",
				"/var/log/pods and /var/log for /logs/ (read-only here), proxies",
				"streams to containerd's loopback streaming server, reads the node's",
				"usage through procfs and cAdvisor (/dev stays, cAdvisor maps",
				"filesystems to block devices), keeps its serving certificate in the",
				"state dir's pki and looks up the node's addresses over netlink. Exec,",
				"attach, port-forward and container stats go through CRI (group",
				CRIGroup + "); container logs, which containerd writes 0640 root, and",
				"the node's kubeconfig (root's, 0600) it reads with CAP_DAC_READ_SEARCH.",
			},
			Devices:      true,
			Caps:         []string{"CAP_DAC_READ_SEARCH"},
			WritesShared: true,
			Netlink:      true,
			Private:      true,
		},
		Compose: Compose{
			Why:     []string{"Reads the pods' logs for the kubelet API and measures their usage."},
			Volumes: []string{ComposePodLogs + ":" + ComposePodLogs + ":ro"},
		},
	},
	{
		Name: GC, Process: true, Description: "nodelet garbage collection and eviction",
		MemoryLimit: "48Mi",
		Requires:    []string{Bus, Runtime}, NeedsCRI: true,
		Writes: []Bucket{{BucketPressure, 5}, {BucketEvictions, 1}, {BucketImages, 1}},
		Reads:  []string{BucketDesired, BucketSources, BucketObserved, BucketPressure, BucketEvictions, BucketImages},
		Events: true, Heartbeats: true,
		Systemd: Systemd{
			Why: []string{
				"GC rotates and removes container logs under /var/log/pods",
				"(node.podLogsDir, the runtime's, writable here), measures emptyDir",
				"volumes whose files belong to any user and removes pod log",
				"directories (CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE: the directory of",
				"seeds is hidden from it), removes containers and images over CRI",
				"(group " + CRIGroup + "), and reads /proc and the root memory cgroup",
				"for the eviction signals. Graceful node shutdown",
				"(gc.shutdownGracePeriod) takes a logind delay inhibitor, which logind",
				"grants a user of its own through polkit or CAP_SYS_BOOT: it holds",
				"CAP_SYS_BOOT for that check alone, the reboot system calls are denied.",
			},
			DenySyscalls: []string{"@reboot"},
			PodLogs:      true,
			Caps:         []string{"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_SYS_BOOT"},
			LoopbackOnly: true,
		},
		Compose: Compose{
			Why: []string{
				"Rotates and removes pod logs; reads the host's root memory cgroup for",
				"the eviction signals.",
			},
			CgroupHost: true,
			Volumes: []string{
				ComposePodLogs + ":" + ComposePodLogs,
				"/sys/fs/cgroup:/sys/fs/cgroup:ro",
			},
		},
	},
	{
		// `nodelet up`: it reads every heartbeat and reports its own
		// decisions as events.
		Name: Supervisor, Events: true, ReadsHealth: true,
		MemoryLimit: "32Mi",
	},
	{
		// nodelet tap: read-only, sees everything.
		Name: Tap, ReadsEverything: true,
	},
}
