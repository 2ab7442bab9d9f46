package runtime

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/schemas"
)

// testCA is a self-signed Ed25519 CA.
type testCA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
	pem  string
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// runTestSigner plays a pod certificate signer in namespace ns, as the
// e2e suite's hermetic signer does: requests for signer are issued by ca
// (a leaf for the pod's service account, min(24h, maxExpirationSeconds),
// refreshed 30 minutes before it ends), requests for deny are denied.
func runTestSigner(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns, signer, deny string, ca *testCA) {
	go func() {
		for ctx.Err() == nil {
			w, err := admin.CertificatesV1().PodCertificateRequests(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				pcr, ok := ev.Object.(*certificatesv1.PodCertificateRequest)
				if !ok || len(pcr.Status.Conditions) > 0 {
					continue
				}
				switch pcr.Spec.SignerName {
				case signer:
					pcr = signTestPCR(t, pcr, ca)
				case deny:
					pcr = pcr.DeepCopy()
					pcr.Status.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeDenied,
						Status: metav1.ConditionTrue, Reason: "NotThisPod", Message: "policy says no", LastTransitionTime: metav1.Now()}}
				default:
					continue
				}
				if _, err := admin.CertificatesV1().PodCertificateRequests(ns).UpdateStatus(ctx, pcr, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
					t.Errorf("signer: %v", err)
				}
			}
		}
	}()
}

func signTestPCR(t *testing.T, pcr *certificatesv1.PodCertificateRequest, ca *testCA) *certificatesv1.PodCertificateRequest {
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		t.Errorf("signer: %v", err)
		return pcr
	}
	life := 24 * time.Hour
	if m := time.Duration(*pcr.Spec.MaxExpirationSeconds) * time.Second; m < life {
		life = m
	}
	notBefore := time.Now().Add(-2 * time.Minute).Truncate(time.Second)
	notAfter := notBefore.Add(life)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: pcr.Spec.PodName},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		t.Errorf("signer: %v", err)
		return pcr
	}
	pcr = pcr.DeepCopy()
	pcr.Status.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued,
		Status: metav1.ConditionTrue, Reason: "Signed", Message: "issued", LastTransitionTime: metav1.Now()}}
	pcr.Status.CertificateChain = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	pcr.Status.NotBefore = ptr.To(metav1.NewTime(notBefore))
	pcr.Status.BeginRefreshAt = ptr.To(metav1.NewTime(notAfter.Add(-30 * time.Minute)))
	pcr.Status.NotAfter = ptr.To(metav1.NewTime(notAfter))
	return pcr
}

// pemSubjects are the common names of the certificates in s.
func pemSubjects(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	rest := []byte(s)
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Subject.CommonName)
	}
}

// clusterTrustBundle projections through a real kube-apiserver, with the
// node's identity (the Node authorizer's read of bundles): by name, by
// signer and labels (each certificate once), a missing optional one empty;
// a pod whose non-optional selection matches nothing waits with
// FailedMount and the kubelet's message, and starts once a bundle
// matches. Before, admission refused such pods and the runtime failed the
// volume.
func TestClusterTrustBundleProjectionThroughAPI(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	signer := "nodelet.test/" + ns
	prefix := strings.ReplaceAll(signer, "/", ":") + ":"
	a, b, c := newTestCA(t, "a"), newTestCA(t, "b"), newTestCA(t, "c")
	mk := func(name, sig string, lbls map[string]string, bundle string) {
		t.Helper()
		if _, err := admin.CertificatesV1().ClusterTrustBundles().Create(h.ctx, &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: sig, TrustBundle: bundle}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CertificatesV1().ClusterTrustBundles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	mk(prefix+"one", signer, map[string]string{"alive": "true"}, a.pem+b.pem)
	mk(prefix+"two", signer, map[string]string{"alive": "true"}, b.pem)
	mk(prefix+"dead", signer, map[string]string{"alive": "false"}, c.pem)
	mk(ns+"-plain", "", nil, c.pem)

	projected := func(srcs ...corev1.ClusterTrustBundleProjection) corev1.Volume {
		v := corev1.Volume{Name: "anchors", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}
		for i := range srcs {
			v.Projected.Sources = append(v.Projected.Sources, corev1.VolumeProjection{ClusterTrustBundle: &srcs[i]})
		}
		return v
	}
	pod := newPod("ctb", withMount(busybox("app", "exec sleep 3600"), "anchors", "/anchors"))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	pod.Spec.Volumes = []corev1.Volume{projected(
		corev1.ClusterTrustBundleProjection{Name: ptr.To(ns + "-plain"), Path: "plain.pem"},
		corev1.ClusterTrustBundleProjection{SignerName: &signer, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"alive": "true"}}, Path: "alive.pem"},
		corev1.ClusterTrustBundleProjection{Name: ptr.To(ns + "-absent"), Optional: ptr.To(true), Path: "absent.pem"},
	)}
	created := createPod(t, h, cp, ns, pod)
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	cat := func(f string) string { out, _ := h.execIn(o, "app", false, "cat", "/anchors/"+f); return out }
	if got := pemSubjects(t, cat("plain.pem")); len(got) != 1 || got[0] != "c" {
		t.Errorf("plain.pem: %v", got)
	}
	if got := pemSubjects(t, cat("alive.pem")); len(got) != 2 || !(got[0] == "a" && got[1] == "b" || got[0] == "b" && got[1] == "a") {
		t.Errorf("alive.pem: %v, want a and b once each", got)
	}
	if got := cat("absent.pem"); got != "" {
		t.Errorf("absent.pem: %q", got)
	}

	waiting := newPod("ctb-waits", withMount(busybox("app", "exec sleep 3600"), "anchors", "/anchors"))
	waiting.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	waiting.Spec.Volumes = []corev1.Volume{projected(corev1.ClusterTrustBundleProjection{SignerName: &signer,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"alive": "unknown"}}, Optional: ptr.To(false), Path: "x.pem"})}
	w := createPod(t, h, cp, ns, waiting)
	o = h.waitObserved(w, time.Minute, "FailedMount", func(o *schemas.PodObserved) bool { return o.Reason == "FailedMount" })
	want := `MountVolume.SetUp failed for volume "anchors" : combination of signerName and labelSelector matched zero ClusterTrustBundles`
	if o.Message != want || len(h.containers(w.UID)) != 0 {
		t.Fatalf("message %q (containers %d)\nwant %q", o.Message, len(h.containers(w.UID)), want)
	}
	mk(prefix+"unknown", signer, map[string]string{"alive": "unknown"}, a.pem)
	h.waitObserved(w, time.Minute, "running once a bundle matches", func(o *schemas.PodObserved) bool { return running(o, "app") })
}

// podCertificate projections through a real kube-apiserver: the node
// requests a certificate for the pod (NodeRestriction checks the pod, its
// service account and the node by UID), a signer issues it and the pod
// starts with its key, chain and credential bundle, which make a TLS
// certificate with the key the request proved; a pod whose request is
// denied waits with the kubelet's message and a Denied event.
func TestPodCertificateProjectionThroughAPI(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	node := ensureNode(t, cp, nil)
	admin := cp.AdminClient(t)
	signer, deny := "nodelet.test/"+ns, "nodelet.test/deny-"+ns
	ca := newTestCA(t, "pod-ca")
	sctx, stop := context.WithCancel(h.ctx)
	defer stop()
	runTestSigner(t, sctx, admin, ns, signer, deny, ca)

	certPod := func(name, signer string) *corev1.Pod {
		p := newPod(name, withMount(busybox("app", "exec sleep 3600"), "tls", "/tls"))
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		p.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{SignerName: signer, KeyType: "ECDSAP256",
				MaxExpirationSeconds: ptr.To[int32](3600), UserAnnotations: map[string]string{"nodelet.test/a": "b"},
				CredentialBundlePath: "bundle.pem", KeyPath: "key.pem", CertificateChainPath: "chain.pem"}}}}}}}
		return p
	}
	created := createPod(t, h, cp, ns, certPod("mtls", signer))
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	cat := func(f string) string { out, _ := h.execIn(o, "app", false, "cat", "/tls/"+f); return out }
	key, chain, bundle := cat("key.pem"), cat("chain.pem"), cat("bundle.pem")
	if bundle != key+chain {
		t.Fatalf("bundle.pem is not key.pem then chain.pem:\n%s", bundle)
	}
	cert, err := tls.X509KeyPair([]byte(chain), []byte(key))
	if err != nil {
		t.Fatalf("key and chain: %v", err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: poolOf(ca.cert), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
		leaf.NotAfter.Sub(leaf.NotBefore) != time.Hour {
		t.Fatalf("leaf %v–%v: %v", leaf.NotBefore, leaf.NotAfter, err)
	}
	pcrs, err := admin.CertificatesV1().PodCertificateRequests(ns).List(h.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "node-1").String()})
	if err != nil || len(pcrs.Items) != 1 {
		t.Fatalf("requests %v %v", pcrs, err)
	}
	sa, _ := admin.CoreV1().ServiceAccounts(ns).Get(h.ctx, "default", metav1.GetOptions{})
	if s := pcrs.Items[0].Spec; s.PodUID != created.UID || s.NodeUID != node.UID || s.ServiceAccountUID != sa.UID ||
		s.UnverifiedUserAnnotations["nodelet.test/a"] != "b" || *s.MaxExpirationSeconds != 3600 {
		t.Fatalf("request spec %+v", s)
	}

	denied := createPod(t, h, cp, ns, certPod("denied", deny))
	o = h.waitObserved(denied, time.Minute, "denied", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedMount" && strings.Contains(o.Message, "permanently denied")
	})
	want := `MountVolume.SetUp failed for volume "tls" : PodCertificateRequest was permanently denied: reason="NotThisPod" message="policy says no"`
	if o.Message != want {
		t.Fatalf("message %q\nwant %q", o.Message, want)
	}
	ev := h.events.await(t, denied.UID, "Denied", 1)[0]
	if ev.Type != corev1.EventTypeWarning || !strings.HasSuffix(ev.Message, `was denied, reason="NotThisPod", message="policy says no"`) {
		t.Fatalf("event %+v", ev)
	}
}

func poolOf(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}
