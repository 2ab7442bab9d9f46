package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
)

func testManager(t *testing.T) *Daemon {
	cfg := config.Defaults()
	cfg.Node.StateDir = t.TempDir()
	cfg.Node.PodLogsDir = "/var/log/pods"
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# node\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Daemon{
		cfg:       cfg,
		store:     newStore(),
		resources: &podResources{cfg: cfg},
		configSources: configSources{
			hostIPs: []string{"192.0.2.10"},
			capacity: nodeCapacity{CPU: resource.MustParse("4"), Memory: resource.MustParse("8Gi"), Allocatable: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}},
			dns: dnsSettings{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: resolv},
			objects: StaticObjects{
				ConfigMaps: map[string]*corev1.ConfigMap{"default/cm": {Data: map[string]string{"color": "blue", "size": "L"}}},
				Secrets:    map[string]*corev1.Secret{"default/sec": {Data: map[string][]byte{"token": []byte("t0k")}}},
			},
		},
	}
}

func TestSandboxConfig(t *testing.T) {
	m := testManager(t)
	pod := newPod("web", busybox("a", ""))
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}
	pod.Spec.Hostname = "h"
	pod.Spec.Subdomain = "sub"
	pod.Annotations = map[string]string{"note": "x"}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
	rc := "runc"
	pod.Spec.RuntimeClassName = &rc
	cfg, err := m.sandboxConfig(pod, 3)
	if err != nil {
		t.Fatal(err)
	}
	md := cfg.Metadata
	if md.Name != "web" || md.Namespace != "default" || md.Uid != string(pod.UID) || md.Attempt != 3 {
		t.Errorf("metadata %v", md)
	}
	if cfg.Hostname != "h" {
		t.Errorf("hostname %q", cfg.Hostname)
	}
	if cfg.LogDirectory != "/var/log/pods/default_web_"+string(pod.UID) {
		t.Errorf("log dir %q", cfg.LogDirectory)
	}
	if cfg.Labels[labelPodUID] != string(pod.UID) || cfg.Labels["app"] != "web" || cfg.Labels[LabelManaged] != "true" || cfg.Annotations["note"] != "x" {
		t.Errorf("labels %v annotations %v", cfg.Labels, cfg.Annotations)
	}
	if len(cfg.PortMappings) != 1 || cfg.PortMappings[0].HostPort != 8080 || cfg.PortMappings[0].ContainerPort != 80 {
		t.Errorf("port mappings %v", cfg.PortMappings)
	}
	if got := cfg.Linux.CgroupParent; got != "/nodelet/besteffort/pod"+string(pod.UID) {
		t.Errorf("cgroup parent %q", got)
	}
	if cfg.Linux.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" {
		t.Errorf("sysctls %v", cfg.Linux.Sysctls)
	}
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Network != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER || ns.Ipc != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces %v", ns)
	}
	if h, err := m.runtimeHandler(pod); h != "runc" || err != nil {
		t.Errorf("standalone handler %q, %v; want the class name", h, err)
	}

	host := pod.DeepCopy()
	host.Spec.HostNetwork, host.Spec.HostPID, host.Spec.HostIPC = true, true, true
	cfg, _ = m.sandboxConfig(host, 0)
	ns = cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Network != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_NODE || ns.Ipc != runtimeapi.NamespaceMode_NODE || cfg.Hostname != "" {
		t.Errorf("host namespaces %v hostname %q", ns, cfg.Hostname)
	}
	// ClusterFirst on the host network means the node's DNS.
	if !slices.Equal(cfg.DnsConfig.Servers, []string{"192.0.2.53"}) {
		t.Errorf("host network DNS %v", cfg.DnsConfig)
	}
}

func TestPodDNS(t *testing.T) {
	m := testManager(t)
	pod := newPod("p", busybox("a", ""))
	pod.Namespace = "team"
	five := "5"
	for _, tc := range []struct {
		name    string
		mutate  func(*corev1.Pod)
		noDNS   bool
		servers []string
		search  []string
		options []string
	}{
		{name: "ClusterFirst", servers: []string{"10.96.0.10"},
			search:  []string{"team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"},
			options: []string{"ndots:5"}},
		{name: "ClusterFirst without cluster DNS falls back to Default", noDNS: true,
			servers: []string{"192.0.2.53"}, search: []string{"corp.example"}, options: []string{"edns0"}},
		{name: "Default", mutate: func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSDefault },
			servers: []string{"192.0.2.53"}, search: []string{"corp.example"}, options: []string{"edns0"}},
		{name: "None with dnsConfig", mutate: func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &five}}}
		}, servers: []string{"1.1.1.1"}, search: []string{"a.example"}, options: []string{"ndots:5"}},
		{name: "ClusterFirst merges dnsConfig", mutate: func(p *corev1.Pod) {
			two := "2"
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.96.0.10", "1.1.1.1"},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "rotate"}}}
		}, servers: []string{"10.96.0.10", "1.1.1.1"},
			search:  []string{"team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"},
			options: []string{"ndots:2", "rotate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			if tc.mutate != nil {
				tc.mutate(p)
			}
			s := m.dns
			if tc.noDNS {
				s.ClusterDNS = nil
			}
			got, err := podDNS(p, s)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Servers, tc.servers) || !slices.Equal(got.Searches, tc.search) || !slices.Equal(got.Options, tc.options) {
				t.Fatalf("got %v / %v / %v", got.Servers, got.Searches, got.Options)
			}
		})
	}
}

func TestContainerConfig(t *testing.T) {
	m := testManager(t)
	c := busybox("app", "")
	c.Command = []string{"/bin/$(PROG)", "$(MISSING)"}
	c.Args = []string{"--name=$(POD_NAME)", "$$(POD_NAME)", "--color=$(COLOR)"}
	c.WorkingDir = "/work"
	c.Env = []corev1.EnvVar{
		{Name: "PROG", Value: "server"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "GREETING", Value: "hello $(POD_NAME) from $(LATER)"},
		{Name: "LATER", Value: "later"},
		{Name: "APP_LABEL", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "SA", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
		{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "CPU_REQ_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
		{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "color"}}},
		{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}},
	}
	c.EnvFrom = []corev1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	yes, no, uid := true, false, int64(1000)
	c.SecurityContext = &corev1.SecurityContext{
		RunAsUser: &uid, ReadOnlyRootFilesystem: &yes, AllowPrivilegeEscalation: &no,
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
	}
	c.TTY, c.Stdin = true, true
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}}
	pod := newPod("web", c)
	pod.Spec.Volumes = []corev1.Volume{{Name: "data"}}
	cfg, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], containerInputs{
		Kind: "app", RestartCount: 2, ImageRef: "sha256:abc", PodIPs: []string{"10.0.0.7"},
		Volumes: map[string]string{"data": "/host/data"}, EtcHosts: "/x/etc-hosts", TermFile: "/x/term",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Command, []string{"/bin/server", "$(MISSING)"}) {
		t.Errorf("command %q", cfg.Command)
	}
	if !slices.Equal(cfg.Args, []string{"--name=web", "$(POD_NAME)", "--color=blue"}) {
		t.Errorf("args %q", cfg.Args)
	}
	env := map[string]string{}
	for _, kv := range cfg.Envs {
		env[kv.Key] = string(kv.Value)
	}
	for k, want := range map[string]string{
		"POD_NAME": "web", "GREETING": "hello web from $(LATER)", "APP_LABEL": "web", "POD_IP": "10.0.0.7",
		"HOST_IP": "192.0.2.10", "NODE": "node-1", "SA": "default", "MEM_MI": "128", "CPU_LIMIT": "4",
		"CPU_REQ_M": "250", "COLOR": "blue", "TOKEN": "t0k", "CM_color": "blue", "CM_size": "L",
	} {
		if env[k] != want {
			t.Errorf("env %s = %q, want %q", k, env[k], want)
		}
	}
	if cfg.Metadata.Name != "app" || cfg.Metadata.Attempt != 2 || cfg.LogPath != "app/2.log" || cfg.WorkingDir != "/work" || !cfg.Tty || !cfg.Stdin {
		t.Errorf("config %v", cfg)
	}
	if cfg.Image.Image != "sha256:abc" || cfg.Image.UserSpecifiedImage != c.Image {
		t.Errorf("image %v", cfg.Image)
	}
	if cfg.Annotations[annotationRestartCount] != "2" || cfg.Annotations[annotationContainerType] != "app" ||
		cfg.Annotations[annotationPodTerminationGracePeriod] != "30" || cfg.Labels[labelContainerName] != "app" {
		t.Errorf("labels %v annotations %v", cfg.Labels, cfg.Annotations)
	}
	mounts := map[string]*runtimeapi.Mount{}
	for _, mt := range cfg.Mounts {
		mounts[mt.ContainerPath] = mt
	}
	if mt := mounts["/data"]; mt == nil || mt.HostPath != "/host/data" || !mt.Readonly {
		t.Errorf("data mount %v", mt)
	}
	if mounts["/etc/hosts"].GetHostPath() != "/x/etc-hosts" || mounts["/dev/termination-log"].GetHostPath() != "/x/term" {
		t.Errorf("mounts %v", cfg.Mounts)
	}
	r := cfg.Linux.Resources
	if r.CpuShares != 256 || r.CpuQuota != 0 || r.MemoryLimitInBytes != 128<<20 {
		t.Errorf("resources %v", r)
	}
	if r.OomScoreAdj <= 2 || r.OomScoreAdj >= 1000 {
		t.Errorf("burstable OOM score %d", r.OomScoreAdj)
	}
	sc := cfg.Linux.SecurityContext
	if sc.RunAsUser.GetValue() != 1000 || !sc.ReadonlyRootfs || !sc.NoNewPrivs || sc.Privileged ||
		!slices.Equal(sc.Capabilities.AddCapabilities, []string{"NET_ADMIN"}) || len(sc.MaskedPaths) == 0 {
		t.Errorf("security context %v", sc)
	}

	// A missing config map key is a config error naming it.
	bad := pod.DeepCopy()
	bad.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "nope"}}}}
	if _, err := m.containerConfig(context.Background(), bad, &bad.Spec.Containers[0], containerInputs{Volumes: map[string]string{"data": "/d"}}); err == nil ||
		!strings.Contains(err.Error(), "couldn't find key nope in ConfigMap default/cm") {
		t.Errorf("missing key: %v", err)
	}
}

func TestQOSAndResources(t *testing.T) {
	mk := func(req, lim corev1.ResourceList) *corev1.Pod {
		c := busybox("a", "")
		c.Resources = corev1.ResourceRequirements{Requests: req, Limits: lim}
		return newPod("p", c)
	}
	rl := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		qos      corev1.PodQOSClass
		oom      int64
		shares   int64
		quota    int64
		cgroupIn string
	}{
		{"best effort", mk(nil, nil), corev1.PodQOSBestEffort, 1000, 2, 0, "/nodelet/besteffort/"},
		// Limits alone, with the requests the API server (or sources, for a
		// static pod) defaults from them.
		{"guaranteed by limits only", mk(rl("500m", "1Gi"), rl("500m", "1Gi")), corev1.PodQOSGuaranteed, -997, 512, 50000, "/nodelet/pod"},
		{"guaranteed", mk(rl("2", "1Gi"), rl("2", "1Gi")), corev1.PodQOSGuaranteed, -997, 2048, 200000, "/nodelet/pod"},
		{"burstable", mk(rl("100m", "4Gi"), nil), corev1.PodQOSBurstable, 500, 102, 0, "/nodelet/burstable/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testManager(t)
			if q := podutil.QOSClass(tc.pod); q != tc.qos {
				t.Fatalf("QoS %s, want %s", q, tc.qos)
			}
			r := containerResources(tc.pod, &tc.pod.Spec.Containers[0], 8<<30)
			if r.OomScoreAdj != tc.oom || r.CpuShares != tc.shares || r.CpuQuota != tc.quota {
				t.Fatalf("resources %v", r)
			}
			if p := m.resources.cgroupParent(tc.pod); !strings.HasPrefix(p, tc.cgroupIn) {
				t.Fatalf("cgroup parent %q", p)
			}
		})
	}
}

func TestRunAsNonRoot(t *testing.T) {
	yes := true
	root, user := int64(0), int64(1000)
	pod := newPod("p", busybox("a", ""))
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
	for _, tc := range []struct {
		name    string
		runAs   *int64
		img     *runtimeapi.Image
		wantErr string
	}{
		{"image without user is root", nil, &runtimeapi.Image{}, "image will run as root"},
		{"image root", nil, &runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: 0}}, "image will run as root"},
		{"image user", nil, &runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: 65534}}, ""},
		{"image named user", nil, &runtimeapi.Image{Username: "nobody"}, "non-numeric user (nobody)"},
		{"runAsUser 0", &root, nil, "runAsUser breaks non-root policy"},
		{"runAsUser 1000", &user, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: tc.runAs}
			err := verifyRunAsNonRoot(p, &p.Spec.Containers[0], tc.img)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestRestartCountFromLogDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"0.log", "3.log", "2.log.20260101-000000", "x.log"} {
		if err := os.WriteFile(filepath.Join(dir, "app", f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := restartCountOf(&podRuntime{}, "app", dir); n != 4 {
		t.Fatalf("from the log dir: %d, want 4", n)
	}
	pr := &podRuntime{Containers: []*containerInfo{{Name: "app", RestartCount: 7}}}
	if n := restartCountOf(pr, "app", dir); n != 8 {
		t.Fatalf("from the newest instance: %d, want 8", n)
	}
	if n := restartCountOf(&podRuntime{}, "other", dir); n != 0 {
		t.Fatalf("nothing known: %d", n)
	}
}
