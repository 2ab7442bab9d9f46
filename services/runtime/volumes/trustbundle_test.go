package volumes

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testenv"
)

// testCAPEM is a self-signed CA certificate named cn, PEM-encoded.
func testCAPEM(t *testing.T, cn string) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// pemNames are the common names of the certificates in b, sorted.
func pemNames(t *testing.T, b []byte) []string {
	t.Helper()
	out := []string{}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if len(blk.Headers) > 0 || blk.Type != "CERTIFICATE" {
			t.Fatalf("block %s with headers %v", blk.Type, blk.Headers)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Subject.CommonName)
	}
	if len(strings.TrimSpace(string(b))) != 0 {
		t.Fatalf("text left after the certificates: %q", b)
	}
	slices.Sort(out)
	return out
}

// fakeWithCTBAPI is a fake clientset whose discovery serves
// clustertrustbundles in the given versions of certificates.k8s.io.
func fakeWithCTBAPI(versions []string, objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	d := c.Discovery().(*fakediscovery.FakeDiscovery)
	for _, v := range versions {
		d.Resources = append(d.Resources, &metav1.APIResourceList{GroupVersion: "certificates.k8s.io/" + v,
			APIResources: []metav1.APIResource{{Name: "clustertrustbundles", Kind: "ClusterTrustBundle"}}})
	}
	return c
}

// Trust anchors as the kubelet's clustertrustbundle manager finds them: by
// name, or by signer and label selector (nil matches nothing, empty
// everything of the signer), each certificate once, a missing bundle empty
// when optional and an error otherwise; the newest served version of the
// API is used; none served (or no API server) fails as on a static kubelet.
func TestTrustAnchors(t *testing.T) {
	a, b, c, plain := testCAPEM(t, "a"), testCAPEM(t, "b"), testCAPEM(t, "c"), testCAPEM(t, "plain")
	const signer = "example.com/sig"
	v1 := func(name, sig string, lbls map[string]string, bundle string) runtime.Object {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
			Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: sig, TrustBundle: bundle}}
	}
	objs := []runtime.Object{
		v1("example.com:sig:one", signer, map[string]string{"alive": "true"}, "junk before\n"+a+b),
		v1("example.com:sig:two", signer, map[string]string{"alive": "true"}, b+c),
		v1("example.com:sig:dead", signer, map[string]string{"alive": "false"}, c),
		v1("other.com:sig:x", "other.com/sig", map[string]string{"alive": "true"}, plain),
		v1("plain", "", nil, plain),
	}
	for _, tc := range []struct {
		name      string
		byName    string
		selector  *metav1.LabelSelector
		optional  bool
		want      []string
		errPart   string
		versions  []string
		objs      []runtime.Object
		noClient  bool
		bySignerQ bool
	}{
		{name: "by name", byName: "plain", want: []string{"plain"}},
		{name: "by name, blocks of a signer's bundle", byName: "example.com:sig:one", want: []string{"a", "b"}},
		{name: "missing name, optional", byName: "nope", optional: true, want: []string{}},
		{name: "missing name", byName: "nope", errPart: `while getting ClusterTrustBundle: clustertrustbundle.certificates.k8s.io "nope" not found`},
		{name: "signer and labels, deduplicated", bySignerQ: true, selector: &metav1.LabelSelector{MatchLabels: map[string]string{"alive": "true"}}, want: []string{"a", "b", "c"}},
		{name: "signer and expressions", bySignerQ: true, selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "alive", Operator: metav1.LabelSelectorOpIn, Values: []string{"false"}}}}, want: []string{"c"}},
		{name: "signer, empty selector is everything", bySignerQ: true, selector: &metav1.LabelSelector{}, want: []string{"a", "b", "c"}},
		{name: "signer, nil selector matches nothing", bySignerQ: true, optional: true, want: []string{}},
		{name: "signer, nothing matches", bySignerQ: true, selector: &metav1.LabelSelector{MatchLabels: map[string]string{"alive": "unknown"}},
			errPart: "combination of signerName and labelSelector matched zero ClusterTrustBundles"},
		{name: "v1beta1 only", byName: "beta", versions: []string{"v1beta1"}, want: []string{"a"},
			objs: []runtime.Object{&certificatesv1beta1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "beta"},
				Spec: certificatesv1beta1.ClusterTrustBundleSpec{TrustBundle: a}}}},
		{name: "API not served", byName: "plain", versions: []string{}, errPart: errCTBStatic.Error()},
		{name: "standalone", byName: "plain", noClient: true, errPart: errCTBStatic.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			versions, objects := tc.versions, tc.objs
			if versions == nil {
				versions = []string{"v1", "v1beta1"}
			}
			if objects == nil {
				objects = objs
			}
			var tb *trustBundles
			if tc.noClient {
				tb = newTrustBundles(nil, quietLog(), nil)
			} else {
				tb = newTrustBundles(fakeWithCTBAPI(versions, objects...), quietLog(), nil)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var got []byte
			var err error
			if tc.bySignerQ {
				got, err = tb.bySigner(ctx, signer, tc.selector, tc.optional)
			} else {
				got, err = tb.byName(ctx, tc.byName, tc.optional)
			}
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want %q", err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names := pemNames(t, got); !slices.Equal(names, tc.want) {
				t.Fatalf("anchors %v, want %v", names, tc.want)
			}
		})
	}
}

// A projected volume writes the anchors of its clusterTrustBundle
// sources with the volume's mode, 0600 with an fsGroup; a non-optional
// source that matches nothing fails the volume with the kubelet's message.
func TestClusterTrustBundleProjection(t *testing.T) {
	testenv.RequiresRoot(t)
	ca := testCAPEM(t, "root")
	client := fakeWithCTBAPI([]string{"v1"}, &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:sig:one"},
		Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/sig", TrustBundle: ca}})
	m := New(Options{StateDir: t.TempDir(), Client: client, Log: quietLog()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := testPod("ctb", vol("anchors", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o644),
		Sources: []corev1.VolumeProjection{
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("example.com/sig"), LabelSelector: &metav1.LabelSelector{}, Path: "ca.pem"}},
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("absent"), Optional: ptr.To(true), Path: "none.pem"}},
		}}}))
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1234)}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), string(pod.UID)) })
	paths, err := m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(paths["anchors"], "ca.pem")); got != ca {
		t.Fatalf("ca.pem = %q, want the bundle's certificate", got)
	}
	if got := readFile(t, filepath.Join(paths["anchors"], "none.pem")); got != "" {
		t.Fatalf("none.pem = %q", got)
	}
	if mode := fileMode(t, filepath.Join(paths["anchors"], "ca.pem")); mode != 0o640 {
		t.Fatalf("mode %o, want 0640 (0600 and the fsGroup's read)", mode)
	}

	bad := testPod("bad", vol("anchors", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("example.com/sig"),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"alive": "unknown"}}, Optional: ptr.To(false), Path: "ca.pem"}},
	}}}))
	t.Cleanup(func() { _ = m.Teardown(context.Background(), string(bad.UID)) })
	_, err = m.Setup(ctx, bad)
	want := `MountVolume.SetUp failed for volume "anchors" : combination of signerName and labelSelector matched zero ClusterTrustBundles`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}

// fileMode is the permission bits of the file p (through symlinks).
func fileMode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
