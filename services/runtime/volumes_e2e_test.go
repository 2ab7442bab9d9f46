package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// execIn runs cmd in the pod's container and returns its stdout; a
// non-zero exit fails the test unless allowFail.
func (h *harness) execIn(o *schemas.PodObserved, name string, allowFail bool, cmd ...string) (string, int32) {
	h.t.Helper()
	c := container(o, name)
	if c == nil || c.ContainerID == "" {
		h.t.Fatalf("no container %s: %s", name, describe(o))
	}
	resp, err := h.cri.Runtime.ExecSync(h.ctx, &runtimeapi.ExecSyncRequest{ContainerId: trimContainerID(c.ContainerID), Cmd: cmd, Timeout: 30})
	if err != nil {
		h.t.Fatalf("exec %v in %s: %v", cmd, name, err)
	}
	if resp.ExitCode != 0 && !allowFail {
		h.t.Fatalf("exec %v in %s: exit %d: %s", cmd, name, resp.ExitCode, resp.Stderr)
	}
	return string(resp.Stdout), resp.ExitCode
}

// volumesGone checks that nothing of the pod is left under the state dir:
// no directory, no mount (tmpfs or bind) in /proc/self/mountinfo.
func (h *harness) volumesGone(uid string) {
	h.t.Helper()
	dir := podDir(h.cfg.Node.StateDir, uid)
	waitFor(h.t, time.Minute, "pod directory removed", func() (bool, string) {
		_, err := os.Stat(dir)
		ms := testenv.MountsUnder(dir)
		return os.IsNotExist(err) && len(ms) == 0, strings.Join(ms, ",")
	})
}

func mountFSType(path string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != path {
			continue
		}
		for i := range f {
			if f[i] == "-" && i+1 < len(f) {
				return f[i+1]
			}
		}
	}
	return ""
}

// Two init containers write to an emptyDir in order, the app container
// reads both lines; a memory emptyDir is a tmpfs; once the pod is removed
// no volume directory and no mount of it remains.
func TestEmptyDirSharedByInitContainers(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("emptydir",
		withMount(withMount(busybox("app", "cat /data/order > /scratch/seen; exec sleep 3600"), "data", "/data"), "scratch", "/scratch"))
	pod.Spec.InitContainers = []corev1.Container{
		withMount(busybox("init-1", "sleep 1; echo init-1 >> /data/order"), "data", "/data"),
		withMount(busybox("init-2", "echo init-2 >> /data/order"), "data", "/data"),
	}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	}
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "app running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	out, _ := h.execIn(o, "app", false, "cat", "/scratch/seen")
	if out != "init-1\ninit-2\n" {
		t.Fatalf("the app read %q", out)
	}
	data := filepath.Join(h.cfg.Node.StateDir, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "data")
	if b, err := os.ReadFile(filepath.Join(data, "order")); err != nil || string(b) != "init-1\ninit-2\n" {
		t.Fatalf("emptyDir on the host: %q %v", b, err)
	}
	scratch := filepath.Join(filepath.Dir(data), "scratch")
	if fs := mountFSType(scratch); fs != "tmpfs" {
		t.Fatalf("memory emptyDir %s is %q, want tmpfs", scratch, fs)
	}
	h.remove(pod)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) { return h.obs.wasDeleted(pod.UID), "" })
	h.volumesGone(string(pod.UID))
}

// A deleted pod is finished (the observed state nodelet-status waits for
// before it deletes the pod from the API) only once its volumes are
// unmounted and its cgroup removed, as the kubelet's SyncTerminatedPod;
// its sandbox and its containers' files stay until it leaves the node.
func TestDeletedPodFinishedAfterUnmount(t *testing.T) {
	requiresCgroupV1(t)
	h := newHarness(t, harnessOptions{})
	pod := newPod("finish", withMount(busybox("app", "exec sleep 3600"), "scratch", "/scratch"))
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "app running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if o.Finished {
		t.Fatal("a running pod is observed finished")
	}
	uid := string(pod.UID)
	scratch := filepath.Join(h.cfg.Node.StateDir, "pods", uid, "volumes", "kubernetes.io~empty-dir", "scratch")
	cgroup := filepath.Join("/sys/fs/cgroup/memory", podCgroupPath(t, h, uid, corev1.PodQOSBestEffort))
	if mountFSType(scratch) != "tmpfs" {
		t.Fatalf("memory emptyDir %s not mounted", scratch)
	}
	if _, err := os.Stat(cgroup); err != nil {
		t.Fatalf("pod cgroup: %v", err)
	}

	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	deleting.DeletionGracePeriodSeconds = &grace
	h.desire(deleting)
	o = h.waitObserved(pod, time.Minute, "finished", func(o *schemas.PodObserved) bool { return o.Finished })
	if !o.Terminated {
		t.Fatalf("finished but not terminated: %+v", o)
	}
	if ms := testenv.MountsUnder(podDir(h.cfg.Node.StateDir, uid)); len(ms) > 0 {
		t.Fatalf("finished with mounts left: %v", ms)
	}
	if _, err := os.Stat(filepath.Dir(scratch)); !os.IsNotExist(err) {
		t.Fatalf("finished with the emptyDir left: %v", err)
	}
	if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
		t.Fatalf("finished with the pod cgroup left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(podDir(h.cfg.Node.StateDir, uid), "containers", "app")); err != nil {
		t.Fatalf("the container's files went with the volumes: %v", err)
	}
	if len(h.sandboxes(pod.UID)) == 0 {
		t.Fatal("the sandbox of a pod still on the node was removed")
	}

	h.remove(pod)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) { return h.obs.wasDeleted(pod.UID), "" })
	h.volumesGone(uid)
}

// subPath mounts stay inside their volume: a subPath through a symlink
// that leads out of the volume, or with "..", fails that container with
// CreateContainerConfigError; a good subPath of the same volume works.
func TestSubPathCannotEscapeVolume(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	sub := func(c corev1.Container, subPath string) corev1.Container {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/mnt", SubPath: subPath}}
		return c
	}
	pod := newPod("subpath",
		sub(busybox("good", "exec sleep 3600"), "ok"),
		sub(busybox("symlink", "exec sleep 3600"), "escape"),
		sub(busybox("dotdot", "exec sleep 3600"), "../../../../etc"),
	)
	pod.Spec.InitContainers = []corev1.Container{
		withMount(busybox("prepare", "mkdir -p /data/ok && echo fine > /data/ok/file && ln -s /etc /data/escape"), "data", "/data"),
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "good running, the others refused", func(o *schemas.PodObserved) bool {
		return running(o, "good") && waitingReason(o, "symlink") == reasonCreateConfigError && waitingReason(o, "dotdot") == reasonCreateConfigError
	})
	if msg := container(o, "symlink").State.Waiting.Message; msg != `failed to prepare subPath for volumeMount "data" of container "symlink"` {
		t.Fatalf("symlink: %q", msg)
	}
	if msg := container(o, "dotdot").State.Waiting.Message; msg != "unable to provision SubPath `../../../../etc`: must not contain '..'" {
		t.Fatalf("dotdot: %q", msg)
	}
	if out, _ := h.execIn(o, "good", false, "cat", "/mnt/file"); out != "fine\n" {
		t.Fatalf("good subPath reads %q", out)
	}
	h.remove(pod)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) { return h.obs.wasDeleted(pod.UID), "" })
	h.volumesGone(string(pod.UID))
}

// On a standalone node a configMap volume cannot be read: the pod waits
// with FailedMount and a message naming the volume and why.
func TestStandaloneConfigMapVolumeFails(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("standalone", withMount(busybox("app", "exec sleep 3600"), "cfg", "/etc/cfg"))
	pod.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}
	h.run(pod)
	o := h.waitObserved(pod, time.Minute, "FailedMount", func(o *schemas.PodObserved) bool { return o.Reason == "FailedMount" })
	want := `MountVolume.SetUp failed for volume "cfg" : configmap "app-config": no API server to read it from (standalone node: node.kubeconfig is empty)`
	if o.Message != want {
		t.Fatalf("message %q\nwant %q", o.Message, want)
	}
	// The event travels its own stream: it may arrive after the state.
	h.events.await(t, pod.UID, "FailedMount", 1)
}

// apiHarness is a runtime reading API objects with the node's identity,
// with pods created in a fresh namespace of the control plane.
func apiHarness(t *testing.T, configure func(*config.Config)) (*harness, *testenv.ControlPlane, string) {
	cp := sharedControlPlane(t)
	ns := cp.Namespace(t)
	h := newHarness(t, harnessOptions{
		configure: configure,
		options:   func(o *Options) { o.Objects = NewAPIObjectsFor(cp.NodeClient(t), "node-1") },
	})
	return h, cp, ns
}

// createPod creates pod through the API (bound to node-1, with the API's
// defaults and admission: the service account token volume) and hands it to
// the runtime as the sources would.
func createPod(t *testing.T, h *harness, cp *testenv.ControlPlane, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pod = pod.DeepCopy()
	pod.Namespace, pod.UID = ns, ""
	created, err := cp.AdminClient(t).CoreV1().Pods(ns).Create(h.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.run(created)
	return created
}

// A configMap volume and env from a secret appear in the container; the
// configMap volume is read-only; the secret volume is a tmpfs; updating the
// configMap changes the file in the running container within the sync
// period, through the ..data symlink swap, and a reader looping in the
// container never reads half a version.
func TestConfigMapVolumeAndSecretEnvThroughAPI(t *testing.T) {
	const period = 20 * time.Second
	h, cp, ns := apiHarness(t, func(c *config.Config) { c.Runtime.SyncFrequency = period })
	admin := cp.AdminClient(t)
	big := func(c string) string { return strings.Repeat(c, 64*1024) }
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"},
		Data: map[string]string{"greeting": "hello", "big": big("A")}}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(h.ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Data: map[string][]byte{"password": []byte("s3cret")}}
	if _, err := admin.CoreV1().Secrets(ns).Create(h.ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The reader: every read of big must be 64 KiB of one letter.
	reader := `i=0; while true; do cat /etc/app/big > /tmp/r; n=$(wc -c < /tmp/r);
a=$(tr -cd A < /tmp/r | wc -c); b=$(tr -cd B < /tmp/r | wc -c);
if [ "$n" != 65536 ] || { [ "$a" != 65536 ] && [ "$b" != 65536 ]; }; then echo "torn n=$n a=$a b=$b" >> /tmp/torn; fi;
i=$((i+1)); echo $i > /tmp/reads; done`
	app := busybox("app", "("+reader+") & exec sleep 3600")
	app.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}, {Name: "creds", MountPath: "/etc/creds"}}
	app.Env = []corev1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}}
	app.EnvFrom = []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}
	pod := newPod("configured", app)
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}},
	}
	created := createPod(t, h, cp, ns, pod)
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })

	if out, _ := h.execIn(o, "app", false, "cat", "/etc/app/greeting"); out != "hello" {
		t.Fatalf("configMap file reads %q", out)
	}
	if out, _ := h.execIn(o, "app", false, "sh", "-c", `echo "$DB_PASSWORD $CFG_greeting"`); out != "s3cret hello\n" {
		t.Fatalf("env from the secret and configMap: %q", out)
	}
	if out, _ := h.execIn(o, "app", false, "cat", "/etc/creds/password"); out != "s3cret" {
		t.Fatalf("secret file reads %q", out)
	}
	if _, code := h.execIn(o, "app", true, "touch", "/etc/app/new"); code == 0 {
		t.Fatal("the configMap volume is writable")
	}
	uid := string(created.UID)
	cfgDir := filepath.Join(h.cfg.Node.StateDir, "pods", uid, "volumes", "kubernetes.io~configmap", "cfg")
	credsDir := filepath.Join(h.cfg.Node.StateDir, "pods", uid, "volumes", "kubernetes.io~secret", "creds")
	if fs := mountFSType(credsDir); fs != "tmpfs" {
		t.Fatalf("secret volume %s on %q, want tmpfs", credsDir, fs)
	}
	before, err := os.Readlink(filepath.Join(cfgDir, "..data"))
	if err != nil || !strings.HasPrefix(before, "..") {
		t.Fatalf("..data: %q %v", before, err)
	}
	if l, _ := os.Readlink(filepath.Join(cfgDir, "big")); l != "..data/big" {
		t.Fatalf("big -> %q, want ..data/big", l)
	}
	waitFor(t, time.Minute, "reader running", func() (bool, string) {
		out, _ := h.execIn(o, "app", true, "cat", "/tmp/reads")
		return strings.TrimSpace(out) != "" && strings.TrimSpace(out) != "0", out
	})

	fresh, err := admin.CoreV1().ConfigMaps(ns).Get(h.ctx, "app-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fresh.Data = map[string]string{"greeting": "bonjour", "big": big("B")}
	updated := time.Now()
	if _, err := admin.CoreV1().ConfigMaps(ns).Update(h.ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, period+40*time.Second, "the new configMap in the container", func() (bool, string) {
		out, _ := h.execIn(o, "app", true, "cat", "/etc/app/greeting")
		return out == "bonjour", out
	})
	took := time.Since(updated)
	t.Logf("configMap update visible in the container after %v (sync period %v, Watch strategy)", took, period)
	after, _ := os.Readlink(filepath.Join(cfgDir, "..data"))
	if after == before || !strings.HasPrefix(after, "..") {
		t.Fatalf("..data %q -> %q: not swapped", before, after)
	}
	if _, err := os.Stat(filepath.Join(cfgDir, before)); !os.IsNotExist(err) {
		t.Fatalf("old data directory %s left: %v", before, err)
	}
	// Let the reader run across the new version for a while.
	reads := func() string { out, _ := h.execIn(o, "app", true, "cat", "/tmp/reads"); return strings.TrimSpace(out) }
	r0 := reads()
	waitFor(t, time.Minute, "more reads after the update", func() (bool, string) { r := reads(); return r != r0, r })
	if out, code := h.execIn(o, "app", true, "cat", "/tmp/torn"); code == 0 {
		t.Fatalf("the reader saw a partial file: %s", out)
	}
	if out, _ := h.execIn(o, "app", false, "sh", "-c", "tr -d B < /etc/app/big | wc -c"); strings.TrimSpace(out) != "0" {
		t.Fatalf("big is not all B after the update: %s other bytes", out)
	}

	h.remove(created)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) { return h.obs.wasDeleted(created.UID), "" })
	h.volumesGone(uid)
}

// An API pod with the default service account token volume
// (kube-api-access-*, added by admission) reads its token, ca.crt and
// namespace; the token authenticates against kube-apiserver as the pod's
// service account, bound to the pod.
func TestServiceAccountTokenVolume(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	pod := newPod("sa", busybox("app", "exec sleep 3600"))
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	created := createPod(t, h, cp, ns, pod)
	var volName string
	for _, v := range created.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil {
			volName = v.Name
		}
	}
	if volName == "" {
		t.Fatalf("admission added no kube-api-access volume: %+v", created.Spec.Volumes)
	}
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	token, _ := h.execIn(o, "app", false, "cat", dir+"/token")
	ca, _ := h.execIn(o, "app", false, "cat", dir+"/ca.crt")
	gotNS, _ := h.execIn(o, "app", false, "cat", dir+"/namespace")
	if ca != string(cp.CAData) || gotNS != ns || token == "" {
		t.Fatalf("ca.crt matches: %v, namespace %q, token %d bytes", ca == string(cp.CAData), gotNS, len(token))
	}
	review, err := cp.AdminClient(t).AuthenticationV1().TokenReviews().Create(h.ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:"+ns+":default" {
		t.Fatalf("token review: %+v", st)
	}
	if podName := st.User.Extra["authentication.kubernetes.io/pod-name"]; len(podName) != 1 || podName[0] != created.Name {
		t.Fatalf("token not bound to the pod: %+v", st.User.Extra)
	}
	hostDir := filepath.Join(h.cfg.Node.StateDir, "pods", string(created.UID), "volumes", "kubernetes.io~projected", volName)
	if fs := mountFSType(hostDir); fs != "tmpfs" {
		t.Fatalf("token volume on %q, want tmpfs", fs)
	}
	h.remove(created)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) { return h.obs.wasDeleted(created.UID), "" })
	h.volumesGone(string(created.UID))
}

// A pod whose env references a missing secret key waits with
// CreateContainerConfigError naming the key; a pod beside it runs.
func TestMissingSecretKeyFailsOnlyItsPod(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Data: map[string][]byte{"password": []byte("x")}}
	if _, err := cp.AdminClient(t).CoreV1().Secrets(ns).Create(h.ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	broken := busybox("app", "exec sleep 3600")
	broken.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "token"}}}}
	bad := createPod(t, h, cp, ns, newPod("missing-key", broken))
	good := createPod(t, h, cp, ns, newPod("bystander", busybox("app", "exec sleep 3600")))
	o := h.waitObserved(bad, 2*time.Minute, "CreateContainerConfigError", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonCreateConfigError
	})
	if msg := container(o, "app").State.Waiting.Message; msg != "couldn't find key token in Secret "+ns+"/db" {
		t.Fatalf("message %q", msg)
	}
	h.waitObserved(good, 2*time.Minute, "bystander running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if o := h.obs.get(bad.UID); waitingReason(o, "app") != reasonCreateConfigError {
		t.Fatalf("the broken pod changed: %s", describe(o))
	}
}
