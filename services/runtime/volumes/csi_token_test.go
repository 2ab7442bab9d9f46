package volumes

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// serviceAccountTokenAttrs is the kubelet's podServiceAccountTokenAttrs:
// nothing without tokenRequests; else one token of the pod's service
// account per audience ("" asks for the API's own audiences), bound to the
// pod, as JSON by audience, for the secrets with
// serviceAccountTokenInSecrets.
func TestServiceAccountTokenAttrs(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	api := &fakeTokenAPI{clock: clk}
	var asked []*authenticationv1.TokenRequest
	c := &csiPlugin{tokens: newTokenManager(func(ctx context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		asked = append(asked, tr.DeepCopy())
		return api.request(ctx, ns, name, tr)
	}, clk)}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"}, Spec: corev1.PodSpec{ServiceAccountName: "sa"}}
	ctx := context.Background()
	if attrs, _, err := c.serviceAccountTokenAttrs(ctx, pod, nil); attrs != nil || err != nil {
		t.Fatalf("no CSIDriver: %v %v", attrs, err)
	}
	exp := int64(600)
	inSecrets := true
	obj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: storagev1.CSIDriverSpec{
		TokenRequests: []storagev1.TokenRequest{{Audience: "vault", ExpirationSeconds: &exp}, {Audience: ""}}, ServiceAccountTokenInSecrets: &inSecrets}}
	attrs, secrets, err := c.serviceAccountTokenAttrs(ctx, pod, obj)
	if err != nil || !secrets {
		t.Fatalf("attrs %v, in secrets %v, err %v", attrs, secrets, err)
	}
	var got map[string]authenticationv1.TokenRequestStatus
	if err := json.Unmarshal([]byte(attrs["csi.storage.k8s.io/serviceAccount.tokens"]), &got); err != nil || len(attrs) != 1 {
		t.Fatalf("attrs %v (%v)", attrs, err)
	}
	if got["vault"].Token != "ns/sa#1" || got[""].Token != "ns/sa#2" {
		t.Fatalf("tokens %+v", got)
	}
	if len(asked) != 2 || len(asked[0].Spec.Audiences) != 1 || asked[0].Spec.Audiences[0] != "vault" || *asked[0].Spec.ExpirationSeconds != 600 ||
		len(asked[1].Spec.Audiences) != 0 || asked[0].Spec.BoundObjectRef.UID != "uid-1" || asked[0].Spec.BoundObjectRef.Kind != "Pod" {
		t.Fatalf("token requests %+v", asked)
	}
	// Published again before 80% of their life: the same tokens.
	if again, _, _ := c.serviceAccountTokenAttrs(ctx, pod, obj); again["csi.storage.k8s.io/serviceAccount.tokens"] != attrs["csi.storage.k8s.io/serviceAccount.tokens"] || len(asked) != 2 {
		t.Fatalf("tokens asked again: %d requests", len(asked))
	}
}
