package soak

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/images"
)

// The soak's objects. Every pod is busybox (imported into every node's
// containerd, never pulled) and does one thing a node agent must undo when
// the pod goes: volumes of every kind the issue names (configMap, secret,
// emptyDir on disk and in memory, a projected service account token with a
// configMap and the downward API), init containers, HTTP, TCP and exec
// probes, a container that crashes and one that a liveness probe kills
// (restarts and back-off), a container that ignores SIGTERM (killed at the
// end of its grace period, after a preStop hook), Jobs whose pods finish,
// some after a failed first try, and bare pods that run to completion or
// are deleted while they run.

const (
	// Namespace holds every object of the soak.
	Namespace = "nodelet-soak"
	// kindLabel names what made a pod: a Deployment's name, "job" or "bare".
	kindLabel = "soak.nodelet.io/kind"
	// revAnnotation changes to roll a Deployment's pods.
	revAnnotation = "soak.nodelet.io/rev"
	configName    = "soak-config"
	secretName    = "soak-secret"
)

// sigtermExit makes a shell that exits at once on SIGTERM while cmd runs
// in the background: the pod's graceful stop takes no grace period.
func sigtermExit(cmd string) []string {
	return []string{"sh", "-c", `trap "exit 0" TERM; ` + cmd + ` & wait`}
}

func container(name string, command []string) corev1.Container {
	return corev1.Container{Name: name, Image: images.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: command}
}

func mount(name, path string) corev1.VolumeMount {
	return corev1.VolumeMount{Name: name, MountPath: path}
}

var (
	configVolume = corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configName}}}}
	secretVolume = corev1.Volume{Name: "secret", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secretName}}}
	projectedVolume = corev1.Volume{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: configName},
				Items: []corev1.KeyToPath{{Key: "greeting", Path: "greeting"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
		}}}}
)

func emptyDir(name string, medium corev1.StorageMedium) corev1.Volume {
	v := corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium}}}
	if medium == corev1.StorageMediumMemory {
		v.EmptyDir.SizeLimit = ptr.To(resource.MustParse("8Mi"))
	}
	return v
}

func requests(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}

func guaranteed(cpu, mem string) corev1.ResourceRequirements {
	r := requests(cpu, mem)
	r.Limits = r.Requests.DeepCopy()
	return r
}

func httpProbe(path string, port, period, failures int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
		PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 2}
}

// deploymentKind is one Deployment of the soak: its pod spec, and the
// share of the node it starts with and may range over.
type deploymentKind struct {
	name string
	// share is the part of the node's pods it starts with; min and max
	// bound its replicas as parts of the node.
	share, min, max float64
	spec            func() corev1.PodSpec
}

var deploymentKinds = []deploymentKind{
	{name: "web", share: 0.45, min: 0.2, max: 0.7, spec: webSpec},
	{name: "exec", share: 0.1, min: 0.03, max: 0.15, spec: execSpec},
	{name: "crashy", share: 0.1, min: 0.03, max: 0.15, spec: crashySpec},
	{name: "slow", share: 0.1, min: 0.03, max: 0.2, spec: slowSpec},
}

// webSpec: an init container copies the page from the configMap into an
// emptyDir that httpd serves, behind HTTP readiness and TCP liveness
// probes; every volume kind mounted.
func webSpec() corev1.PodSpec {
	web := container("web", sigtermExit("httpd -f -p 8080 -h /work"))
	web.Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	web.ReadinessProbe = httpProbe("/index.html", 8080, 5, 3)
	web.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 10, TimeoutSeconds: 2}
	web.VolumeMounts = []corev1.VolumeMount{mount("config", "/cfg"), mount("secret", "/secret"), mount("work", "/work"),
		mount("projected", "/projected")}
	web.Resources = requests("1m", "4Mi")
	init := container("init", []string{"sh", "-c", "cp /cfg/greeting /work/index.html"})
	init.VolumeMounts = []corev1.VolumeMount{mount("config", "/cfg"), mount("work", "/work")}
	return corev1.PodSpec{InitContainers: []corev1.Container{init}, Containers: []corev1.Container{web},
		Volumes: []corev1.Volume{configVolume, secretVolume, emptyDir("work", ""), projectedVolume}}
}

// execSpec: an exec readiness probe, a memory-backed emptyDir, and the
// Guaranteed QoS class.
func execSpec() corev1.PodSpec {
	c := container("exec", sigtermExit("sleep 100000"))
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/cfg/greeting"}}},
		PeriodSeconds: 10, TimeoutSeconds: 5}
	c.VolumeMounts = []corev1.VolumeMount{mount("config", "/cfg"), mount("mem", "/mem")}
	c.Resources = guaranteed("5m", "16Mi")
	return corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: []corev1.Volume{configVolume, emptyDir("mem", corev1.StorageMediumMemory)}}
}

// crashySpec: one container exits with an error every 30 s, the other
// stops serving its liveness page after 45 s: restarts, back-off, and the
// events that go with them.
func crashySpec() corev1.PodSpec {
	crash := container("crash", []string{"sh", "-c", "sleep 30; exit 1"})
	sick := container("sick", []string{"sh", "-c",
		`mkdir -p /w; echo ok > /w/h; (sleep 45; rm -f /w/h) & trap "exit 0" TERM; httpd -f -p 8081 -h /w & wait`})
	sick.LivenessProbe = httpProbe("/h", 8081, 5, 2)
	return corev1.PodSpec{Containers: []corev1.Container{crash, sick}}
}

// slowSpec: PID 1 ignores SIGTERM, so every stop runs the preStop hook and
// then the grace period out to SIGKILL.
func slowSpec() corev1.PodSpec {
	c := container("slow", []string{"sleep", "100000"})
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 1"}}}}
	c.VolumeMounts = []corev1.VolumeMount{mount("secret", "/secret")}
	return corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: []corev1.Volume{secretVolume},
		TerminationGracePeriodSeconds: ptr.To[int64](3)}
}

func deployment(k deploymentKind, replicas int) *appsv1.Deployment {
	labels := map[string]string{kindLabel: k.name}
	// No surge: the node is full, a surged pod would wait for a place.
	maxUnavailable := intstr.FromString("30%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: &maxUnavailable}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: k.spec()},
		},
	}
}

// job runs completions pods, parallelism at a time, each sleeping a few
// seconds; a flaky job's pods each fail their first try (the emptyDir
// remembers it across the container's restart). The Job and its pods are
// deleted as soon as it finishes (ttlSecondsAfterFinished 0: the TTL
// controller).
func job(name string, completions, parallelism, seconds int, flaky bool) *batchv1.Job {
	script := fmt.Sprintf("sleep %d", seconds)
	if flaky {
		script = "[ -f /scratch/tried ] || { touch /scratch/tried; exit 1; }; " + script
	}
	c := container("work", []string{"sh", "-c", script})
	c.VolumeMounts = []corev1.VolumeMount{mount("scratch", "/scratch"), mount("config", "/cfg")}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(int32(completions)), Parallelism: ptr.To(int32(parallelism)),
			BackoffLimit: ptr.To[int32](6), TTLSecondsAfterFinished: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kindLabel: "job"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{c},
					Volumes: []corev1.Volume{emptyDir("scratch", ""), configVolume}},
			},
		},
	}
}

// barePod runs for seconds and succeeds (restartPolicy Never), or with
// seconds 0 runs until it is deleted.
func barePod(name string, seconds int) *corev1.Pod {
	cmd, policy := sigtermExit("sleep 100000"), corev1.RestartPolicyAlways
	if seconds > 0 {
		cmd, policy = []string{"sh", "-c", fmt.Sprintf("cat /cfg/greeting /secret/password > /dev/null; sleep %d", seconds)}, corev1.RestartPolicyNever
	}
	c := container("bare", cmd)
	c.VolumeMounts = []corev1.VolumeMount{mount("config", "/cfg"), mount("secret", "/secret")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{kindLabel: "bare"}},
		Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{configVolume, secretVolume}},
	}
}

func configMap(rev int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configName, Namespace: Namespace},
		Data: map[string]string{"greeting": fmt.Sprintf("hello from the soak, revision %d\n", rev)}}
}

func secret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: Namespace},
		StringData: map[string]string{"password": "soak"}}
}
