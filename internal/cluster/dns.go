package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"text/template"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// Names kubeadm gives the DNS addon's objects (cmd/kubeadm/app/constants:
// CoreDNSDeploymentName, CoreDNSConfigMap; the rest in
// phases/addons/dns/manifests.go).
const (
	dnsNamespace      = metav1.NamespaceSystem
	dnsDeploymentName = "coredns"
	dnsConfigMapName  = "coredns"
	dnsAccountName    = "coredns"
	dnsServiceName    = "kube-dns"
	dnsRoleName       = "system:coredns"
	// dnsAppLabel is the label every object of the addon and its pods carry.
	dnsAppLabel = "k8s-app"
	dnsAppValue = "kube-dns"
	// dnsReplicas is kubeadm's coreDNSReplicas (phases/addons/dns/dns.go).
	dnsReplicas = 2
	// controlPlaneTaint is kubeadm's constants.LabelNodeRoleControlPlane,
	// the taint the Deployment tolerates.
	controlPlaneTaint = "node-role.kubernetes.io/control-plane"
)

// DNSOptions choose the cluster DNS InstallDNS deploys.
type DNSOptions struct {
	// Image is the CoreDNS image. Default: images.CoreDNSImage (kubeadm
	// v1.37's, registry.k8s.io/coredns/coredns:v1.14.6).
	Image string
	// ClusterIP is the kube-dns Service's, the nodes' clusterDNS. Default:
	// DNSServiceIP (10.96.0.10).
	ClusterIP string
	// Domain is the cluster domain CoreDNS answers for. Default:
	// ClusterDomain (cluster.local).
	Domain string
	// Replicas is the Deployment's. Default: 0, which is kubeadm's: the
	// replicas of the Deployment already there, else 2.
	Replicas int32
}

func (o DNSOptions) withDefaults() DNSOptions {
	if o.Image == "" {
		o.Image = images.CoreDNSImage
	}
	if o.ClusterIP == "" {
		o.ClusterIP = DNSServiceIP
	}
	if o.Domain == "" {
		o.Domain = ClusterDomain
	}
	return o
}

// InstallDNS creates what kubeadm's DNS addon creates (EnsureDNSAddon and
// createCoreDNSAddon, cmd/kubeadm/app/phases/addons/dns/dns.go): the
// coredns ConfigMap, ClusterRole and ClusterRoleBinding system:coredns,
// ServiceAccount coredns, Deployment coredns and Service kube-dns, all in
// kube-system. As kubeadm's apiclient.CreateOrUpdate, an object that is
// already there is updated to what it creates, so InstallDNS may run again
// (kubeadm keeps a Corefile a user edited; the harness puts its own back).
// It does not wait for CoreDNS: WaitDNS does.
func InstallDNS(ctx context.Context, kube kubernetes.Interface, o DNSOptions) error {
	o = o.withDefaults()
	if o.Replicas == 0 {
		// deployedDNSReplicas: a running cluster keeps its replica count.
		o.Replicas = dnsReplicas
		d, err := kube.AppsV1().Deployments(dnsNamespace).Get(ctx, dnsDeploymentName, metav1.GetOptions{})
		switch {
		case err == nil && d.Spec.Replicas != nil:
			o.Replicas = *d.Spec.Replicas
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("cluster DNS: %w", err)
		}
	}
	objs, err := dnsObjects(o)
	if err != nil {
		return err
	}
	// kubeadm's order: the Corefile first, the Service last.
	core, rbac, ns := kube.CoreV1(), kube.RbacV1(), dnsNamespace
	steps := []func() error{
		func() error { return createOrUpdate(ctx, core.ConfigMaps(ns), objs.ConfigMap) },
		func() error { return createOrUpdate(ctx, rbac.ClusterRoles(), objs.ClusterRole) },
		func() error { return createOrUpdate(ctx, rbac.ClusterRoleBindings(), objs.ClusterRoleBinding) },
		func() error { return createOrUpdate(ctx, core.ServiceAccounts(ns), objs.ServiceAccount) },
		func() error { return createOrUpdate(ctx, kube.AppsV1().Deployments(ns), objs.Deployment) },
		func() error { return createOrUpdate(ctx, core.Services(ns), objs.Service) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("cluster DNS: %w", err)
		}
	}
	return nil
}

// typedClient is what client-go's typed clients have for one kind.
type typedClient[T metav1.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// createOrUpdate is kubeadm's apiclient.CreateOrUpdate: create obj, or
// update the one already there to it. An Invalid create is taken as "there"
// too, as kubeadm's createDNSService does for the Service: kube-apiserver
// refuses a second kube-dns for its ClusterIP ("provided IP is already
// allocated") before it looks at the name. If nothing of that name is
// there, the create's error stands.
func createOrUpdate[T metav1.Object](ctx context.Context, c typedClient[T], obj T) error {
	kind := reflect.TypeOf(obj).Elem().Name()
	_, createErr := c.Create(ctx, obj, metav1.CreateOptions{})
	if createErr == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(createErr) && !apierrors.IsInvalid(createErr) {
		return fmt.Errorf("create %s %s: %w", kind, obj.GetName(), createErr)
	}
	cur, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("create %s %s: %w", kind, obj.GetName(), createErr)
	}
	if err != nil {
		return fmt.Errorf("get %s %s: %w", kind, obj.GetName(), err)
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	if _, err := c.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update %s %s: %w", kind, obj.GetName(), err)
	}
	return nil
}

// dnsAddon is every object InstallDNS creates.
type dnsAddon struct {
	ConfigMap          *corev1.ConfigMap
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	ServiceAccount     *corev1.ServiceAccount
	Deployment         *appsv1.Deployment
	Service            *corev1.Service
}

// dnsObjects builds kubeadm's manifests (phases/addons/dns/manifests.go)
// for o, which has its defaults and replicas resolved.
func dnsObjects(o DNSOptions) (dnsAddon, error) {
	corefile, err := Corefile(CorefileOptions{Domain: o.Domain})
	if err != nil {
		return dnsAddon{}, err
	}
	appLabels := map[string]string{dnsAppLabel: dnsAppValue}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: dnsNamespace}
	}
	return dnsAddon{
		// CoreDNSConfigMap.
		ConfigMap: &corev1.ConfigMap{ObjectMeta: meta(dnsConfigMapName), Data: map[string]string{"Corefile": corefile}},
		// CoreDNSClusterRole: what the kubernetes plugin lists and watches.
		ClusterRole: &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: dnsRoleName},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		},
		// CoreDNSClusterRoleBinding.
		ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: dnsRoleName},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: dnsRoleName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsAccountName, Namespace: dnsNamespace}},
		},
		// CoreDNSServiceAccount.
		ServiceAccount: &corev1.ServiceAccount{ObjectMeta: meta(dnsAccountName)},
		Deployment:     dnsDeployment(o, appLabels),
		// CoreDNSService.
		Service: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name: dnsServiceName, Namespace: dnsNamespace,
				Labels: map[string]string{dnsAppLabel: dnsAppValue, "kubernetes.io/cluster-service": "true",
					"kubernetes.io/name": "CoreDNS"},
				Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
			},
			Spec: corev1.ServiceSpec{
				ClusterIP: o.ClusterIP,
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
				},
				Selector: appLabels,
			},
		},
	}, nil
}

// dnsDeployment is kubeadm's CoreDNSDeployment.
func dnsDeployment(o DNSOptions, appLabels map[string]string) *appsv1.Deployment {
	maxUnavailable := intstr.FromInt32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: dnsDeploymentName, Namespace: dnsNamespace, Labels: appLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(o.Replicas),
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable},
			},
			Selector: &metav1.LabelSelector{MatchLabels: appLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels},
				Spec: corev1.PodSpec{
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: dnsAccountName,
					// Replicas spread over nodes where they can.
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
									{Key: dnsAppLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{dnsAppValue}},
								}},
								TopologyKey: corev1.LabelHostname,
							},
						}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: controlPlaneTaint, Effect: corev1.TaintEffectNoSchedule},
					},
					NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
					Containers: []corev1.Container{{
						Name:            "coredns",
						Image:           o.Image,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"),
								corev1.ResourceMemory: resource.MustParse("70Mi")},
						},
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{
							{ContainerPort: 53, Name: "dns", Protocol: corev1.ProtocolUDP},
							{ContainerPort: 53, Name: "dns-tcp", Protocol: corev1.ProtocolTCP},
							{ContainerPort: 9153, Name: "metrics", Protocol: corev1.ProtocolTCP},
							{ContainerPort: 8080, Name: "liveness-probe", Protocol: corev1.ProtocolTCP},
							{ContainerPort: 8181, Name: "readiness-probe", Protocol: corev1.ProtocolTCP},
						},
						// The health plugin's /health (:8080) and the ready
						// plugin's /ready (:8181) of the Corefile.
						LivenessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/health", Port: intstr.FromString("liveness-probe"), Scheme: corev1.URISchemeHTTP}},
							InitialDelaySeconds: 60, TimeoutSeconds: 5, SuccessThreshold: 1, FailureThreshold: 5,
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/ready", Port: intstr.FromString("readiness-probe"), Scheme: corev1.URISchemeHTTP}},
						},
						// Non-root (the image's USER 65532) binding :53 with the
						// image's file capability, the only one left.
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							Capabilities: &corev1.Capabilities{
								Add:  []corev1.Capability{"NET_BIND_SERVICE"},
								Drop: []corev1.Capability{"ALL"},
							},
							ReadOnlyRootFilesystem: ptr.To(true),
						},
					}},
					// CoreDNS must not ask itself: the node's resolv.conf.
					DNSPolicy: corev1.DNSDefault,
					Volumes: []corev1.Volume{{
						Name: "config-volume",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: dnsConfigMapName},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}},
					}},
				},
			},
		},
	}
}

// CorefileOptions choose where a Corefile's CoreDNS listens and how it
// reaches the API. The zero value (but Domain) is the Deployment's: every
// port kubeadm's, the API through the pod's service account (in-cluster
// config: the kubernetes plugin without a kubeconfig).
type CorefileOptions struct {
	// Domain is the cluster domain. Default: ClusterDomain.
	Domain string
	// Port is DNS's, UDP and TCP. Default: 53.
	Port int
	// Bind is the address DNS listens on. Default: "" (every address).
	Bind string
	// Health, Ready and Metrics are the health (/health), ready (/ready)
	// and prometheus plugins' addresses. Defaults: the plugins' own,
	// :8080, :8181 and kubeadm's :9153.
	Health, Ready, Metrics string
	// Kubeconfig is the kubernetes plugin's kubeconfig, for a CoreDNS run
	// outside a pod. Default: "" (in-cluster config).
	Kubeconfig string
}

// corefileTemplate is kubeadm's CoreDNSConfigMap Corefile
// (phases/addons/dns/manifests.go) but for its upstream: kubeadm forwards
// every name outside the cluster zones to the node's resolvers (`forward .
// /etc/resolv.conf`). Nothing may leave this machine, and in this harness
// the node's resolv.conf names 127.0.0.1, which in CoreDNS's own pod
// (dnsPolicy Default) is CoreDNS itself: the loop plugin would see its
// probe come back and stop CoreDNS. So there is no forward at all, and a
// name outside cluster.local and the reverse zones ends the plugin chain
// unanswered: SERVFAIL at once, nothing sent anywhere. Everything else,
// the order included, is kubeadm's; the options only move listeners (a
// test's CoreDNS on loopback) and add a kubeconfig.
var corefileTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("Corefile").Parse(`.:{{ .Port }} {
{{- with .Bind }}
    bind {{ . }}
{{- end }}
    errors
    health {{ with .Health }}{{ . }} {{ end }}{
       lameduck 5s
    }
    ready{{ with .Ready }} {{ . }}{{ end }}
    kubernetes {{ .Domain }} in-addr.arpa ip6.arpa {
{{- with .Kubeconfig }}
       kubeconfig {{ . }}
{{- end }}
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus {{ .Metrics }}
    # No forward: nothing leaves this machine (nodelet's cluster harness).
    cache 30 {
       disable success {{ .Domain }}
       disable denial {{ .Domain }}
    }
    loop
    reload
    loadbalance
}
`))
})

// Corefile is the Corefile of the coredns ConfigMap, with o's listeners.
func Corefile(o CorefileOptions) (string, error) {
	if o.Domain == "" {
		o.Domain = ClusterDomain
	}
	if o.Port == 0 {
		o.Port = 53
	}
	if o.Metrics == "" {
		o.Metrics = ":9153"
	}
	var b strings.Builder
	if err := corefileTemplate().Execute(&b, o); err != nil {
		return "", fmt.Errorf("Corefile: %w", err)
	}
	return b.String(), nil
}

// WaitDNS waits until the coredns Deployment has rolled out: every replica
// updated and available, as `kubectl rollout status` judges it
// (DeploymentStatusViewer). After timeout it returns what is missing: the
// Deployment's counts and failing conditions, and each CoreDNS pod's phase,
// node and why its containers wait or are not ready.
func WaitDNS(ctx context.Context, kube kubernetes.Interface, timeout time.Duration) error {
	err := eventually.Poll(ctx, clock.RealClock{}, timeout, 500*time.Millisecond, func() error {
		return dnsRolledOut(ctx, kube)
	})
	if err != nil {
		return fmt.Errorf("cluster DNS not available: %w", err)
	}
	return nil
}

// dnsRolledOut is nil once the Deployment is available, else what is not.
func dnsRolledOut(ctx context.Context, kube kubernetes.Interface) error {
	d, err := kube.AppsV1().Deployments(dnsNamespace).Get(ctx, dnsDeploymentName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	s := d.Status
	var state string
	switch {
	case d.Generation > s.ObservedGeneration:
		state = fmt.Sprintf("generation %d not yet observed by the deployment controller (at %d)", d.Generation, s.ObservedGeneration)
	case s.UpdatedReplicas < want, s.Replicas > s.UpdatedReplicas, s.AvailableReplicas < s.UpdatedReplicas:
		state = fmt.Sprintf("%d of %d replicas available (%d updated, %d in all)", s.AvailableReplicas, want, s.UpdatedReplicas, s.Replicas)
	default:
		return nil
	}
	for _, c := range d.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			state += fmt.Sprintf("; %s: %s: %s", c.Type, c.Reason, c.Message)
		}
	}
	return errors.New("coredns Deployment: " + state + "; " + dnsPodsState(ctx, kube))
}

// dnsPodsState says where each CoreDNS pod stands.
func dnsPodsState(ctx context.Context, kube kubernetes.Interface) string {
	pods, err := kube.CoreV1().Pods(dnsNamespace).List(ctx, metav1.ListOptions{LabelSelector: dnsAppLabel + "=" + dnsAppValue})
	if err != nil {
		return "pods: " + err.Error()
	}
	if len(pods.Items) == 0 {
		return "no pods " + dnsAppLabel + "=" + dnsAppValue + " in " + dnsNamespace
	}
	var out []string
	unschedulable := false
	for _, p := range pods.Items {
		node := p.Spec.NodeName
		if node == "" {
			node = "no node"
		}
		s := fmt.Sprintf("pod %s (%s) %s", p.Name, node, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				s += fmt.Sprintf(", unschedulable: %s", c.Message)
				unschedulable = true
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Waiting != nil:
				s += fmt.Sprintf(", %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Terminated != nil:
				s += fmt.Sprintf(", %s terminated: %s (exit %d) %s", cs.Name, cs.State.Terminated.Reason,
					cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
			case !cs.Ready:
				s += fmt.Sprintf(", %s running, not ready (restarts %d)", cs.Name, cs.RestartCount)
			}
		}
		out = append(out, strings.TrimSpace(s))
	}
	sort.Strings(out)
	if unschedulable {
		out = append(out, nodesTaints(ctx, kube))
	}
	return strings.Join(out, "; ")
}

// nodesTaints says what each node is tainted with, for a pod the scheduler
// finds no node for: the taint's key names the condition behind it (e.g.
// node.kubernetes.io/disk-pressure).
func nodesTaints(ctx context.Context, kube kubernetes.Interface) string {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "nodes: " + err.Error()
	}
	if len(nodes.Items) == 0 {
		return "no nodes"
	}
	var out []string
	for _, n := range nodes.Items {
		taints := make([]string, len(n.Spec.Taints))
		for i, t := range n.Spec.Taints {
			taints[i] = t.ToString()
		}
		out = append(out, fmt.Sprintf("node %s taints [%s]", n.Name, strings.Join(taints, " ")))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
