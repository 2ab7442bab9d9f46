package volumes

import (
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testenv"
)

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, 30*time.Second, what, cond)
}

// With the Watch strategy a change of a referenced configMap is written
// at once, without waiting for the sync period (the clock never moves).
func TestWatchStrategyWritesChangesAtOnce(t *testing.T) {
	testenv.RequiresRoot(t)
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns"}, Data: map[string]string{"k": "v1"}})
	clk := clocktesting.NewFakeClock(time.Now())
	m := New(Options{StateDir: t.TempDir(), Client: client, Clock: clk, SyncFrequency: time.Hour, Log: quietLog()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	pod := testPod("w", vol("cfg", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}))
	t.Cleanup(func() { _ = m.Teardown(context.Background(), string(pod.UID)) })
	paths, err := m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(paths["cfg"], "k")
	if got := readFile(t, file); got != "v1" {
		t.Fatalf("k = %q", got)
	}
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns"}, Data: map[string]string{"k": "v2"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the watched change in the volume", func() bool { return readFile(t, file) == "v2" })
	// Teardown stops the watch.
	if err := m.Teardown(ctx, string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	if n := len(m.plugins.objects.(*watchSource).items); n != 0 {
		t.Fatalf("%d watches left after teardown", n)
	}
}

// A projected service account token is requested bound to the pod and
// written again once 80 % of its lifetime has passed.
func TestProjectedTokenIsRefreshedAt80Percent(t *testing.T) {
	testenv.RequiresRoot(t)
	client := fake.NewClientset()
	var mu sync.Mutex
	var requests []*authenticationv1.TokenRequest
	clk := clocktesting.NewFakeClock(time.Now())
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		mu.Lock()
		requests = append(requests, tr.DeepCopy())
		tr.Status.Token = fmt.Sprintf("token-%d", len(requests))
		mu.Unlock()
		tr.Status.ExpirationTimestamp = metav1.NewTime(clk.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
		return true, tr, nil
	})
	m := New(Options{StateDir: t.TempDir(), Client: client, Clock: clk, SyncFrequency: time.Hour, Log: quietLog()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	exp := int64(600)
	pod := testPod("t", vol("kube-api-access-x", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
	}}}))
	pod.Spec.ServiceAccountName = "builder"
	t.Cleanup(func() { _ = m.Teardown(context.Background(), string(pod.UID)) })
	paths, err := m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := paths["kube-api-access-x"]
	if readFile(t, filepath.Join(dir, "token")) != "token-1" || readFile(t, filepath.Join(dir, "namespace")) != "ns" {
		t.Fatal("projected files")
	}
	if fsTypeAt(t, dir) != "tmpfs" {
		t.Fatal("projected volume not on tmpfs")
	}
	mu.Lock()
	r := requests[0]
	mu.Unlock()
	if ref := r.Spec.BoundObjectRef; ref == nil || ref.Kind != "Pod" || ref.Name != "t" || ref.UID != pod.UID ||
		len(r.Spec.Audiences) != 0 || *r.Spec.ExpirationSeconds != 600 {
		t.Fatalf("token request %+v", r.Spec)
	}
	clk.Step(470 * time.Second) // 78 %: nothing yet
	time.Sleep(200 * time.Millisecond)
	if got := readFile(t, filepath.Join(dir, "token")); got != "token-1" {
		t.Fatalf("token refreshed early: %s", got)
	}
	waitUntil(t, "the refreshed token", func() bool {
		clk.Step(5 * time.Second)
		return readFile(t, filepath.Join(dir, "token")) == "token-2"
	})
}
