package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// saTokenAttributes puts the test plugin in service-account token mode:
// it is given a token of the pod's service account for the registry's
// audience, and only for service accounts with the annotation that names
// the registry user.
const saTokenAttributes = `  tokenAttributes:
    serviceAccountTokenAudience: nodelet-test-registry
    requireServiceAccount: true
    requiredServiceAccountAnnotationKeys: [nodelet.test/registry-user]
    cacheType: ServiceAccount
`

// The kubelet's service-account token mode for credential providers
// (KubeletServiceAccountTokenForCredentialProviders), against a real
// kube-apiserver: a pod whose service account carries the annotation the
// provider requires pulls a private image with the credentials the plugin
// made from a token of that service account (a JWT for the provider's
// audience, bound to the pod); a pod whose service account lacks it gets
// no plugin run and cannot pull. The pull record names the service
// account, so another pod of it uses the image without a pull, while a pod
// of another service account cannot use it with Never. After the image is
// gone its record is pruned (the kubelet's PruneUnknownRecords).
func TestCredentialProviderServiceAccountTokens(t *testing.T) {
	cp := sharedControlPlane(t)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ctx := t.Context()
	// The node may ask tokens for the provider's audience (the API's
	// ServiceAccountNodeAudienceRestriction), as an operator grants it.
	role := "nodelet-test-registry-audience-" + ns
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodelet-test-registry"}, Verbs: []string{"request-serviceaccounts-token-audience"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(ctx, role, metav1.DeleteOptions{}) })
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, role, metav1.DeleteOptions{}) })
	for name, annotations := range map[string]map[string]string{
		"puller": {"nodelet.test/registry-user": regUser},
		"plain":  nil,
	} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A containerd of its own: removing the pushed image below removes
	// every tag of its ID, the shared containerd's busybox among them (the
	// registry serves that image).
	h := newHarness(t, harnessOptions{noStart: true, containerd: testenv.NewContainerd(t, testenv.ContainerdOptions{})})
	reg := startRegistry(t, h)
	cfgFile, binDir, calls := buildProvider(t, reg.host, saTokenAttributes)
	h.cfg.Runtime.ImageCredentialProviderConfig, h.cfg.Runtime.ImageCredentialProviderBinDir = cfgFile, binDir
	h.start(func(o *Options) { o.Objects = NewAPIObjectsFor(cp.NodeClient(t), "node-1") })
	img := reg.push(t, "private/sa:1")
	// Pods exist in the API, bound to the node: tokens are bound to them.
	pod := func(name, sa string, policy corev1.PullPolicy) *corev1.Pod {
		p := imagePod(name, img, policy, "exec sleep 3600")
		p.Namespace, p.UID = ns, ""
		p.Spec.ServiceAccountName = sa
		p.Spec.NodeName = "node-1"
		p.Spec.TerminationGracePeriodSeconds = new(int64)
		created, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}

	first := pod("sa-first", "puller", corev1.PullIfNotPresent)
	h.run(first)
	h.waitObserved(first, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := reg.pullsOf("private/sa:1"); n != 1 {
		t.Fatalf("%d pulls, want 1", n)
	}
	if runs := pluginRuns(t, calls); !slices.Equal(runs, []string{reg.host + "/private/sa token"}) {
		t.Fatalf("plugin runs %q, want one with a token", runs)
	}
	recs, _ := filepath.Glob(filepath.Join(h.cfg.Node.StateDir, "image_manager", "pulled", "sha256-*"))
	if len(recs) != 1 {
		t.Fatalf("pulled records %v", recs)
	}
	b, err := os.ReadFile(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if rec := string(b); !strings.Contains(rec, `"kubernetesServiceAccounts":[{"uid":"`) || !strings.Contains(rec, `"namespace":"`+ns+`","name":"puller"`) {
		t.Fatalf("pulled record %s does not name the service account", b)
	}

	// No annotation, no plugin run: the registry refuses the pull.
	plain := pod("sa-plain", "plain", corev1.PullAlways)
	h.run(plain)
	h.waitSeen(plain, time.Minute, "ErrImagePull", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonErrImagePull
	})
	if runs := pluginRuns(t, calls); len(runs) != 1 {
		t.Fatalf("plugin runs %q: run for a service account without the required annotation", runs)
	}

	// Another pod of the service account uses the image on the node (the
	// record names it); a pod of another one may not.
	again := pod("sa-again", "puller", corev1.PullNever)
	h.run(again)
	h.waitObserved(again, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	never := pod("sa-never", "plain", corev1.PullNever)
	h.run(never)
	h.waitObserved(never, time.Minute, "ErrImageNeverPull", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonErrImageNeverPull
	})
	if n := reg.pullsOf("private/sa:1"); n != 1 {
		t.Fatalf("%d pulls, want still 1", n)
	}

	// The image goes: its record goes at the next pruning.
	for _, p := range []*corev1.Pod{first, plain, again, never} {
		h.remove(p)
	}
	waitFor(t, 2*time.Minute, "the pods' containers gone", func() (bool, string) {
		for _, p := range []*corev1.Pod{first, again} {
			if n := len(h.containers(p.UID)); n > 0 {
				return false, fmt.Sprintf("pod %s has %d containers", p.Name, n)
			}
		}
		return true, ""
	})
	if _, err := h.cri.Image.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: img}}); err != nil {
		t.Fatal(err)
	}
	h.m.images.pruneRecords(ctx)
	if recs, _ := filepath.Glob(filepath.Join(h.cfg.Node.StateDir, "image_manager", "pulled", "sha256-*")); len(recs) != 0 {
		t.Fatalf("pulled records %v left after the image went", recs)
	}
}
