package volumes

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// issue signs pcr's key as a leaf valid for life from now, refreshed
// from refreshAt, with the PEM text a careless signer may add.
func issue(t *testing.T, pcr *certificatesv1.PodCertificateRequest, now time.Time, refreshAt time.Duration, life time.Duration) *certificatesv1.PodCertificateRequest {
	t.Helper()
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		t.Fatal(err)
	}
	caPub, caKey, _ := ed25519.GenerateKey(rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), IsCA: true, BasicConstraintsValid: true, NotBefore: now, NotAfter: now.Add(life),
		KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, ca, ca, caPub, caKey)
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: now, NotAfter: now.Add(life)}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, csr.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	out := pcr.DeepCopy()
	out.Status.CertificateChain = "leaf:\n" + string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"x": "y"}, Bytes: der}))
	out.Status.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue, Reason: "Ok"}}
	out.Status.NotBefore = ptr.To(metav1.NewTime(now))
	out.Status.BeginRefreshAt = ptr.To(metav1.NewTime(now.Add(refreshAt)))
	out.Status.NotAfter = ptr.To(metav1.NewTime(now.Add(life)))
	return out
}

type recordedEvent struct{ typ, reason, msg string }

// The kubelet's podcertificate state machine, one step at a time over a
// fake API and clock: no credentials until a request is made (spec: the
// pod, its service account and the node by UID, the projection's signer,
// lifetime and annotations, an owner reference to the pod, a proof made
// with the key), none until it is issued, then the key and the cleaned
// chain; from beginRefreshAt (plus jitter) a second request while the
// first credentials stay; an overdue warning once; a denial ends it with
// the kubelet's message and event; a request not seen for 10 minutes is
// made again; a forgotten pod has nothing.
func TestPodCertificateStateMachine(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	client := fake.NewClientset(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "ns", UID: "sa-uid"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid"}},
	)
	// The fake API generates no names: as kube-apiserver, req-<n>.
	generated := 0
	client.PrependReactor("create", "podcertificaterequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.PodCertificateRequest)
		generated++
		o.Name = fmt.Sprintf("%s%d", o.GenerateName, generated)
		o.CreationTimestamp = metav1.NewTime(clk.Now())
		return false, nil, nil
	})
	c := newPodCertificates(client, "node-1", clk, quietLog())
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	c.lister = certlisters.NewPodCertificateRequestLister(indexer)
	var mu sync.Mutex
	var events []recordedEvent
	var notified int
	c.event = func(_ *corev1.Pod, typ, reason, msg string) {
		mu.Lock()
		events = append(events, recordedEvent{typ, reason, msg})
		mu.Unlock()
	}
	c.issued = func(types.UID) { mu.Lock(); notified++; mu.Unlock() }

	pod := testPod("p", vol("tls", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{DownwardAPI: &corev1.DownwardAPIProjection{}},
		{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/s", KeyType: "ED25519",
			MaxExpirationSeconds: ptr.To[int32](3600), UserAnnotations: map[string]string{"a": "b"}, CredentialBundlePath: "b.pem"}},
	}}}))
	pod.Spec.ServiceAccountName = "default"
	key := projectionKey{Namespace: "ns", PodName: "p", PodUID: "uid-p", VolumeName: "tls", SourceIndex: 1}

	wantErr := func(step, part string) {
		t.Helper()
		if _, _, err := c.bundle(pod, "tls", 1); err == nil || !strings.Contains(err.Error(), part) {
			t.Fatalf("%s: bundle err = %v, want %q", step, err, part)
		}
	}
	pcrs := func() []certificatesv1.PodCertificateRequest {
		t.Helper()
		l, err := client.CertificatesV1().PodCertificateRequests("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	step := func(name string) {
		t.Helper()
		if err := c.handle(ctx, key); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	seen := 0
	nameNew := func() *certificatesv1.PodCertificateRequest {
		t.Helper()
		l := pcrs()
		if len(l) != seen+1 {
			t.Fatalf("%d requests, want %d", len(l), seen+1)
		}
		seen++
		return &l[len(l)-1]
	}

	c.track(pod)
	if c.queue.Len() != 1 {
		t.Fatalf("queued %d projections, want 1", c.queue.Len())
	}
	wantErr("tracked", "no credentials yet for key={ns p uid-p tls 1}")

	step("initial")
	first := nameNew()
	s := first.Spec
	if s.SignerName != "example.com/s" || s.PodName != "p" || s.PodUID != "uid-p" || s.ServiceAccountName != "default" ||
		s.ServiceAccountUID != "sa-uid" || s.NodeName != "node-1" || s.NodeUID != "node-uid" || *s.MaxExpirationSeconds != 3600 ||
		s.UnverifiedUserAnnotations["a"] != "b" || first.GenerateName != "req-" ||
		len(first.OwnerReferences) != 1 || first.OwnerReferences[0].UID != "uid-p" || first.OwnerReferences[0].Kind != "Pod" {
		t.Fatalf("request %+v", first)
	}
	csr, err := x509.ParseCertificateRequest(s.StubPKCS10Request)
	if err != nil || csr.CheckSignature() != nil {
		t.Fatalf("stub request: %v", err)
	}
	if _, ok := csr.PublicKey.(ed25519.PublicKey); !ok {
		t.Fatalf("key type %T, want ed25519", csr.PublicKey)
	}
	wantErr("requested", "credential bundle is not issued yet")

	// Not in the informer yet: an error (tried again with back-off);
	// then there, pending.
	if err := c.handle(ctx, key); err == nil || !strings.Contains(err.Error(), `"req-1" not found`) {
		t.Fatalf("not seen yet: %v", err)
	}
	_ = indexer.Add(first)
	step("pending")
	wantErr("pending", "credential bundle is not issued yet")

	issued := issue(t, first, start, time.Hour, 2*time.Hour)
	_ = indexer.Update(issued)
	step("issued")
	keyPEM, chain, err := c.bundle(pod, "tls", 1)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(keyPEM)
	priv, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil || blk.Type != "PRIVATE KEY" {
		t.Fatalf("key %s: %v", blk.Type, err)
	}
	cb, rest := pem.Decode(chain)
	if len(rest) != 0 || len(cb.Headers) != 0 || strings.Contains(string(chain), "leaf:") {
		t.Fatalf("chain not cleaned: %q", chain)
	}
	leaf, _ := x509.ParseCertificate(cb.Bytes)
	if !priv.(ed25519.PrivateKey).Public().(ed25519.PublicKey).Equal(leaf.PublicKey) {
		t.Fatal("the key is not the certificate's")
	}
	mu.Lock()
	if notified != 1 {
		t.Fatalf("notified %d times, want 1", notified)
	}
	mu.Unlock()

	// Before beginRefreshAt nothing; past it and its jitter a new request,
	// the old credentials still served.
	clk.SetTime(start.Add(59 * time.Minute))
	step("fresh")
	if n := len(pcrs()); n != 1 {
		t.Fatalf("%d requests before beginRefreshAt", n)
	}
	clk.SetTime(start.Add(time.Hour + 5*time.Minute + time.Second))
	step("refresh")
	second := nameNew()
	if _, got, _ := c.bundle(pod, "tls", 1); string(got) != string(chain) {
		t.Fatal("credentials dropped while refreshing")
	}
	_ = indexer.Add(second)
	clk.SetTime(start.Add(time.Hour + 16*time.Minute))
	step("overdue")
	step("overdue again")
	mu.Lock()
	if len(events) != 1 || events[0].reason != "CertificateOverdueForRefresh" || events[0].msg != "PodCertificate refresh overdue" {
		t.Fatalf("events %+v", events)
	}
	mu.Unlock()

	denied := second.DeepCopy()
	denied.Status.Conditions = []metav1.Condition{{Type: certificatesv1.PodCertificateRequestConditionTypeDenied, Status: metav1.ConditionTrue, Reason: "Policy", Message: "no"}}
	_ = indexer.Update(denied)
	step("denied")
	wantErr("denied", `PodCertificateRequest was permanently denied: reason="Policy" message="no"`)
	mu.Lock()
	if e := events[len(events)-1]; e.typ != corev1.EventTypeWarning || e.reason != "Denied" ||
		e.msg != `PodCertificateRequest ns/`+second.Name+` was denied, reason="Policy", message="no"` {
		t.Fatalf("event %+v", e)
	}
	mu.Unlock()

	c.forgetPod(pod.UID)
	wantErr("forgotten", "no credentials yet")
	if err := c.handle(ctx, key); err != nil {
		t.Fatalf("a forgotten pod's key: %v", err)
	}

	// A request never seen for 10 minutes (and its jitter) is made again.
	c.track(pod)
	step("again")
	nameNew()
	clk.SetTime(clk.Now().Add(16 * time.Minute))
	if err := c.handle(ctx, key); err == nil || !strings.Contains(err.Error(), "appears to have been deleted") {
		t.Fatalf("abandoned request: %v", err)
	}
	step("asked again")
	nameNew()
}
