package sources

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
		},
	}
}

func apiHarness(t *testing.T, cp *testenv.ControlPlane, configure func(*config.Config)) *harness {
	return newHarness(t, func(c *config.Config) {
		c.Node.Name = cp.NodeName
		c.Node.Kubeconfig = cp.NodeKubeconfig
		if configure != nil {
			configure(c)
		}
	})
}

// TestAPISource follows a pod bound to the node through create, update,
// a status change, a graceful delete and its removal, against a real
// kube-apiserver, through the node's own identity. A pod bound to another
// node is never seen.
func TestAPISource(t *testing.T) {
	cp := controlPlane(t)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := admin.CoreV1().Pods(ns)

	createAndCleanup(ctx, t, admin, ns, boundPod("elsewhere", "node-2"))
	created := createAndCleanup(ctx, t, admin, ns, boundPod("web", cp.NodeName))
	h := apiHarness(t, cp, nil)
	h.start()

	inNS := func(m map[string]desiredEntry) map[string]desiredEntry {
		out := map[string]desiredEntry{}
		for n, e := range m {
			if e.Pod.Namespace == ns {
				out[n] = e
			}
		}
		return out
	}
	got := inNS(h.waitDesired("web from the API", func(m map[string]desiredEntry) bool {
		_, ok := m["web"]
		return ok
	}))
	web := got["web"]
	if web.Source != schemas.SourceAPI || web.Pod.UID != created.UID || web.Pod.Annotations[podutil.AnnotationConfigSource] != "api" ||
		web.Pod.Annotations[podutil.AnnotationConfigSeen] == "" || len(web.Pod.ManagedFields) != 0 {
		t.Errorf("desired web = %+v %+v", web.PodDesired, web.Pod.ObjectMeta)
	}
	if r := h.waitAllReady(); strings.Join(r.Ready, ",") != "api" {
		t.Errorf("ready = %+v", r)
	}

	// Update: a new image.
	cur, err := pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Containers[0].Image = "busybox:1.37"
	if _, err := pods.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = h.waitDesired("web updated", func(m map[string]desiredEntry) bool {
		e, ok := m["web"]
		return ok && e.Pod.Spec.Containers[0].Image == "busybox:1.37"
	})
	if got["web"].Pod.UID != created.UID || !got["web"].FirstSeen.Equal(web.FirstSeen) ||
		got["web"].Pod.Annotations[podutil.AnnotationConfigSeen] != web.Pod.Annotations[podutil.AnnotationConfigSeen] {
		t.Errorf("update changed identity or first-seen time: %+v", got["web"].PodDesired)
	}

	// Reconcile: a status-only change (as nodelet-status would write).
	cur, err = pods.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Phase = corev1.PodRunning
	cur.Status.Message = "running here"
	if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitDesired("web status reconciled", func(m map[string]desiredEntry) bool {
		e, ok := m["web"]
		return ok && e.Pod.Status.Message == "running here"
	})

	// Graceful delete: the pod stays, with its deletion timestamp, for the
	// runtime to kill it.
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		t.Fatal(err)
	}
	got = h.waitDesired("web terminating", func(m map[string]desiredEntry) bool {
		e, ok := m["web"]
		return ok && e.Pod.DeletionTimestamp != nil
	})
	if g := got["web"].Pod.DeletionGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("deletionGracePeriodSeconds = %v, want 30", g)
	}

	// Gone from the API (the node confirms the kill with grace 0): removed.
	if err := cp.NodeClient(t).CoreV1().Pods(ns).Delete(ctx, "web",
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	h.waitDesired("web removed", func(m map[string]desiredEntry) bool {
		_, ok := m["web"]
		return !ok
	})
	if _, ok := h.desired()["elsewhere"]; ok {
		t.Error("a pod bound to another node reached the bucket")
	}
}

// TestDuplicateFileAndAPI: the same namespace/name from FILE and from the
// API server. Whichever came second is rejected with an event, and the
// first stays published.
func TestDuplicateFileAndAPI(t *testing.T) {
	cp := controlPlane(t)
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// The static pod "dup1" becomes default/dup1-<node>.
	static := "dup1-" + cp.NodeName
	writeFile(t, filepath.Join(dir, "dup1.yaml"), podYAML("dup1", "busybox:1.36"))
	h := apiHarness(t, cp, func(c *config.Config) { c.Sources.StaticPodPath = dir })
	h.start()
	h.waitAllReady()
	fileDup := h.waitDesired("the static pod", func(m map[string]desiredEntry) bool {
		e, ok := m[static]
		return ok && e.Source == schemas.SourceFile
	})[static]

	// FILE first, API second: the API pod is rejected.
	later := createAndCleanup(ctx, t, admin, metav1.NamespaceDefault, boundPod(static, cp.NodeName))
	ev := h.waitEvent("API duplicate rejected", func(e schemas.Event) bool {
		return e.Object.UID == later.UID
	})
	if ev.Reason != ReasonFailedValidation || !strings.Contains(ev.Message, "duplicate pod name") || ev.Object.Name != static {
		t.Errorf("event = %+v", ev)
	}
	if e := h.desired()[static]; e.Source != schemas.SourceFile || e.rev != fileDup.rev {
		t.Errorf("the first pod was touched: %+v rev %d", e.PodDesired, e.rev)
	}

	// API first, FILE second: the static pod is rejected.
	apiName := "dup2-" + cp.NodeName
	first := createAndCleanup(ctx, t, admin, metav1.NamespaceDefault, boundPod(apiName, cp.NodeName))
	h.waitDesired("the API pod", func(m map[string]desiredEntry) bool {
		e, ok := m[apiName]
		return ok && e.Pod.UID == first.UID
	})
	writeFile(t, filepath.Join(dir, "dup2.yaml"), podYAML("dup2", "busybox:1.36"))
	ev = h.waitEvent("FILE duplicate rejected", func(e schemas.Event) bool {
		return e.Object.Name == apiName && e.Object.UID != first.UID
	})
	if !strings.Contains(ev.Message, "from file") {
		t.Errorf("event = %+v", ev)
	}
	if e := h.desired()[apiName]; e.Pod.UID != first.UID {
		t.Errorf("%s is now %s from %s, want the API pod", apiName, e.Pod.UID, e.Source)
	}
}

// createAndCleanup creates a pod and deletes it (at once) when the test
// ends: with no namespace controller, deleting the test's namespace would
// leave its pods bound to the node for the next test to see.
func createAndCleanup(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return created
}
