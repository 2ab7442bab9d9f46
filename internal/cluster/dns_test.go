package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// dnsCP is the control plane of the DNS tests: started by the first test
// that asks for it (the cluster tests start their own), stopped by
// TestMain.
var dnsCP testenv.SharedControlPlane

func TestMain(m *testing.M) {
	code := m.Run()
	dnsCP.Stop()
	os.Exit(code)
}

func controlPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	return dnsCP.Get(t)
}

// The objects are kubeadm's (phases/addons/dns/manifests.go) with the
// options in their places.
func TestDNSObjects(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    DNSOptions
		// want
		image, ip, domain string
		replicas          int32
	}{
		{name: "defaults", o: DNSOptions{Replicas: 2},
			image: images.CoreDNSImage, ip: "10.96.0.10", domain: "cluster.local", replicas: 2},
		{name: "chosen", o: DNSOptions{Image: "example.test/dns:1", ClusterIP: "10.100.0.53", Domain: "example.test", Replicas: 3},
			image: "example.test/dns:1", ip: "10.100.0.53", domain: "example.test", replicas: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := dnsObjects(tc.o.withDefaults())
			if err != nil {
				t.Fatal(err)
			}
			svc := objs.Service
			if svc.Name != "kube-dns" || svc.Namespace != "kube-system" || svc.Spec.ClusterIP != tc.ip ||
				svc.Labels["k8s-app"] != "kube-dns" || svc.Labels["kubernetes.io/name"] != "CoreDNS" ||
				svc.Spec.Selector["k8s-app"] != "kube-dns" {
				t.Errorf("service %s/%s ip %s labels %v selector %v", svc.Namespace, svc.Name, svc.Spec.ClusterIP, svc.Labels, svc.Spec.Selector)
			}
			var ports []string
			for _, p := range svc.Spec.Ports {
				ports = append(ports, fmt.Sprintf("%s %d/%s->%s", p.Name, p.Port, p.Protocol, p.TargetPort.String()))
			}
			if want := []string{"dns 53/UDP->53", "dns-tcp 53/TCP->53", "metrics 9153/TCP->9153"}; !slices.Equal(ports, want) {
				t.Errorf("service ports %q, want %q", ports, want)
			}

			cf := objs.ConfigMap.Data["Corefile"]
			for _, want := range []string{".:53 {", "kubernetes " + tc.domain + " in-addr.arpa ip6.arpa {", "pods insecure",
				"health {\n       lameduck 5s", "    ready\n", "prometheus :9153", "disable success " + tc.domain, "loop"} {
				if !strings.Contains(cf, want) {
					t.Errorf("Corefile lacks %q:\n%s", want, cf)
				}
			}
			if strings.Contains(cf, "    forward ") || strings.Contains(cf, "kubeconfig") {
				t.Errorf("Corefile forwards or has a kubeconfig:\n%s", cf)
			}

			d := objs.Deployment
			spec := d.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("containers %+v", spec.Containers)
			}
			c := spec.Containers[0]
			if c.Image != tc.image || *d.Spec.Replicas != tc.replicas || !slices.Equal(c.Args, []string{"-conf", "/etc/coredns/Corefile"}) {
				t.Errorf("image %s replicas %d args %q", c.Image, *d.Spec.Replicas, c.Args)
			}
			live, ready := c.LivenessProbe.HTTPGet, c.ReadinessProbe.HTTPGet
			if live.Path != "/health" || live.Port.StrVal != "liveness-probe" || ready.Path != "/ready" || ready.Port.StrVal != "readiness-probe" {
				t.Errorf("probes %+v %+v", live, ready)
			}
			named := map[string]int32{}
			for _, p := range c.Ports {
				named[p.Name] = p.ContainerPort
			}
			if named["liveness-probe"] != 8080 || named["readiness-probe"] != 8181 || named["metrics"] != 9153 {
				t.Errorf("container ports %v", named)
			}
			sc := c.SecurityContext
			if *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
				!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_BIND_SERVICE"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("security context %+v", sc)
			}
			anti := spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
			if spec.PriorityClassName != "system-cluster-critical" || spec.ServiceAccountName != "coredns" ||
				spec.DNSPolicy != corev1.DNSDefault || len(spec.Tolerations) != 2 ||
				spec.Tolerations[1].Key != "node-role.kubernetes.io/control-plane" ||
				len(anti) != 1 || anti[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
				t.Errorf("pod spec: priority %q account %q dns %q tolerations %+v anti-affinity %+v",
					spec.PriorityClassName, spec.ServiceAccountName, spec.DNSPolicy, spec.Tolerations, anti)
			}
			if v := spec.Volumes[0].ConfigMap; v.Name != "coredns" || v.Items[0].Key != "Corefile" {
				t.Errorf("config volume %+v", v)
			}

			rules := objs.ClusterRole.Rules
			if objs.ClusterRole.Name != "system:coredns" || len(rules) != 2 || rules[1].Resources[0] != "endpointslices" ||
				objs.ClusterRoleBinding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "coredns", Namespace: "kube-system"}) {
				t.Errorf("role %+v binding %+v", objs.ClusterRole, objs.ClusterRoleBinding)
			}
		})
	}
}

// The ConfigMap's Corefile is kubeadm's but the forward to the node's
// resolvers; a test's CoreDNS moves only its listeners and adds a
// kubeconfig.
func TestCorefile(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    CorefileOptions
		want []string
	}{
		{name: "the Deployment's", o: CorefileOptions{}, want: []string{string(golden)}},
		{name: "on loopback", o: CorefileOptions{Port: 1053, Bind: "127.0.0.1", Health: "127.0.0.1:1", Ready: "127.0.0.1:2",
			Metrics: "127.0.0.1:3", Kubeconfig: "/k/config"},
			want: []string{".:1053 {\n    bind 127.0.0.1\n    errors\n", "    health 127.0.0.1:1 {\n       lameduck 5s\n    }\n",
				"    ready 127.0.0.1:2\n", "ip6.arpa {\n       kubeconfig /k/config\n       pods insecure\n", "    prometheus 127.0.0.1:3\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Corefile(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Corefile lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// InstallDNS may run again (a second run keeps the deployed replica count,
// as kubeadm's deployedDNSReplicas); WaitDNS names what is missing and
// accepts a rolled-out Deployment. No controllers run here: the test plays
// the deployment controller and the node.
func TestInstallAndWaitDNS(t *testing.T) {
	cp := controlPlane(t)
	kube := cp.AdminClient(t)
	ctx := t.Context()
	// The control plane is shared: leave no played status behind.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = kube.AppsV1().Deployments("kube-system").Delete(ctx, "coredns", metav1.DeleteOptions{})
		_ = kube.CoreV1().Pods("kube-system").Delete(ctx, "coredns-test", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	if err := InstallDNS(ctx, kube, DNSOptions{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if err := InstallDNS(ctx, kube, DNSOptions{}); err != nil {
		t.Fatalf("second InstallDNS: %v", err)
	}
	d, err := kube.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d after a second InstallDNS, want the deployed 3", *d.Spec.Replicas)
	}
	svc, err := kube.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != DNSServiceIP {
		t.Fatalf("kube-dns %v: %v", svc, err)
	}

	if err := WaitDNS(ctx, kube, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not yet observed") {
		t.Errorf("WaitDNS before any controller: %v", err)
	}
	// A pod whose image cannot be pulled, and a controller that saw it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns-test", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.PodSpec{NodeName: cp.NodeName, ServiceAccountName: "coredns", Containers: []corev1.Container{{Name: "coredns", Image: d.Spec.Template.Spec.Containers[0].Image}}},
	}
	if pod, err = kube.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "coredns", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not imported"}}}}
	// As the scheduler left it before a tainted node: the error then names
	// the nodes' taints.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cp.NodeName},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/disk-pressure", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), cp.NodeName, metav1.DeleteOptions{}) })
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/1 nodes are available: 1 node(s) had untolerated taint(s)."}}
	if _, err := kube.CoreV1().Pods("kube-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Status = rolloutStatus(d.Generation, 3, 3, 0)
	if d, err = kube.AppsV1().Deployments("kube-system").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = WaitDNS(ctx, kube, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "0 of 3 replicas available") ||
		!strings.Contains(err.Error(), "coredns waiting: ErrImagePull not imported") || !strings.Contains(err.Error(), cp.NodeName) ||
		!strings.Contains(err.Error(), "; node "+cp.NodeName+" taints [node.kubernetes.io/disk-pressure:NoSchedule") {
		t.Errorf("WaitDNS with a pod that cannot pull: %v", err)
	}
	d.Status = rolloutStatus(d.Generation, 3, 3, 3)
	if _, err := kube.AppsV1().Deployments("kube-system").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WaitDNS(ctx, kube, 10*time.Second); err != nil {
		t.Errorf("WaitDNS once rolled out: %v", err)
	}
}

// CoreDNS, built as for its image, serves the cluster with the Corefile
// InstallDNS writes: it runs here as a plain process on loopback, with the
// coredns ServiceAccount's token in a kubeconfig (in a pod the kubernetes
// plugin uses the in-cluster config, the same account), so its
// ClusterRole is what it watches the API with.
func TestCoreDNSServesCluster(t *testing.T) {
	cp := controlPlane(t)
	kube := cp.AdminClient(t)
	ctx := t.Context()
	if err := InstallDNS(ctx, kube, DNSOptions{}); err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.Tool("coredns")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tok, err := kube.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "coredns",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"test": {Server: cp.URL, CertificateAuthorityData: cp.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"coredns": {Token: tok.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"coredns": {Cluster: "test", AuthInfo: "coredns"}},
		CurrentContext: "coredns",
	}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	ports := freeLoopbackPorts(t, 4)
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])) }
	corefile, err := Corefile(CorefileOptions{Port: ports[0], Bind: "127.0.0.1", Health: addr(1), Ready: addr(2),
		Metrics: addr(3), Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := startProcess("coredns", filepath.Join(dir, "coredns.log"), exec.Command(bin, "-conf", conf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(10 * time.Second) })
	alive := func() {
		if err := p.exitedErr(); err != nil {
			t.Fatal(err)
		}
	}

	// /ready answers once the kubernetes plugin has listed what it
	// watches: the readiness probe's path.
	for _, url := range []string{"http://" + addr(2) + "/ready", "http://" + addr(1) + "/health"} {
		eventually.Nil(t, time.Minute, url, func() error {
			alive()
			return httpOK(url)
		})
	}

	// Created after CoreDNS synced: it learns them through its watches.
	ns := cp.Namespace(t)
	web, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Port: 5432}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No endpointslice controller runs here: the slice it would write for
	// two ready pods of db.
	podIPs := []string{"10.244.1.5", "10.244.2.7"}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "db-test", Labels: map[string]string{
			discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "nodelet-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ip := range podIPs {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr(0))
	}}
	for _, tc := range []struct{ name, want string }{
		{"web." + ns + ".svc.cluster.local.", web.Spec.ClusterIP},       // a Service: its ClusterIP
		{"db." + ns + ".svc.cluster.local.", strings.Join(podIPs, " ")}, // headless: the ready endpoints
		{"10-244-1-5." + ns + ".pod.cluster.local.", "10.244.1.5"},      // pods insecure
	} {
		eventually.Nil(t, time.Minute, tc.name, func() error {
			alive()
			addrs, err := r.LookupHost(ctx, tc.name)
			if err != nil {
				return err
			}
			slices.Sort(addrs)
			if got := strings.Join(addrs, " "); got != tc.want {
				return fmt.Errorf("%s resolves to %s, want %s", tc.name, got, tc.want)
			}
			return nil
		})
	}
	names, err := r.LookupAddr(ctx, web.Spec.ClusterIP)
	if err != nil || !slices.Equal(names, []string{"web." + ns + ".svc.cluster.local."}) {
		t.Errorf("PTR of %s: %v (%v)", web.Spec.ClusterIP, names, err)
	}
	// Outside the cluster zones nothing answers (no forward): an error at
	// once, not a timeout.
	start := time.Now()
	if addrs, err := r.LookupHost(ctx, "example.invalid."); err == nil {
		t.Errorf("example.invalid resolves to %v without a forward", addrs)
	} else if d := time.Since(start); d > 3*time.Second {
		t.Errorf("example.invalid failed after %s (%v), want an answer at once", d, err)
	}
}

// rolloutStatus is what the deployment controller reports for a
// Deployment it has seen at generation.
func rolloutStatus(generation int64, replicas, updated, available int32) appsv1.DeploymentStatus {
	return appsv1.DeploymentStatus{ObservedGeneration: generation, Replicas: replicas, UpdatedReplicas: updated,
		AvailableReplicas: available, ReadyReplicas: available}
}

// freeLoopbackPorts returns n ports free on 127.0.0.1 for both TCP and
// UDP (DNS takes both), different from each other.
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var held []interface{ Close() error }
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // UDP taken: another port
		}
		held = append(held, u)
		ports = append(ports, port)
	}
	return ports
}

// httpOK is nil when url answers 200.
func httpOK(url string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
