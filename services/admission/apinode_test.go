package admission

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testenv"
)

// With a real kube-apiserver, admission decides on the API's Node as the
// kubelet's predicate handler does: a label an admin puts on the Node (here
// what the e2e DaemonSet spec "should run and stop complex daemon" does)
// admits the next pod that selects it, and a NoExecute taint refuses the
// next pod that does not tolerate it. Before, admission only knew the
// configured labels and taints, and the DaemonSet's pods were refused
// NodeAffinity for good.
func TestNodeLabelsAndTaintsFromTheAPI(t *testing.T) {
	testenv.RequiresRoot(t)
	cp, stop, err := testenv.StartControlPlane("node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	admin := cp.AdminClient(t)
	ctx := t.Context()
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{"color": "red"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.nodeClient = cp.NodeClient(t)
	h.start()

	n := 0
	// decide puts pods made by mk until one gets the verdict ok wants (the
	// node admission sees follows the API's a moment later), and returns it.
	decide := func(what string, mk func(*corev1.Pod), ok func(admitted bool, reason string) bool) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for {
			n++
			p := makePod(fmt.Sprintf("p%d", n), n, mk)
			h.put(p)
			v, _ := h.wait(p)
			if ok(v.Admitted, v.Reason) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last verdict %+v", what, v)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	selects := func(color string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"color": color} }
	}
	decide("a pod selecting the Node's red label admitted", selects("red"), func(ok bool, _ string) bool { return ok })

	patch := []byte(`{"metadata":{"labels":{"color":"blue"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	decide("a pod selecting blue admitted once the label is blue", selects("blue"), func(ok bool, _ string) bool { return ok })
	h.rejected(func() *corev1.Pod {
		n++
		p := makePod(fmt.Sprintf("p%d", n), n, selects("red"))
		h.put(p)
		return p
	}(), ReasonNodeAffinity, "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")

	patch = []byte(`{"spec":{"taints":[{"key":"maintenance","effect":"NoExecute"}]}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	decide("a pod not tolerating the NoExecute taint refused", func(*corev1.Pod) {},
		func(ok bool, reason string) bool { return !ok && reason == ReasonTaintToleration })
	decide("a pod tolerating it admitted", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	}, func(ok bool, _ string) bool { return ok })
}
