package bus_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

func benchDesired() *schemas.PodDesired {
	return &schemas.PodDesired{Source: schemas.SourceFile, Pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p000-bench", Namespace: "nodelet-bench", UID: "0123456789abcdef0123456789abcdef"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "sleep", Image: "nodelet.local/busybox:1.35", Command: []string{"sleep", "3600"}}}},
	}}
}

// BenchmarkPut is one KV put through the embedded server: encode, publish,
// wait for JetStream's ack (stored on disk).
func BenchmarkPut(b *testing.B) {
	bb := bustest.Start(b)
	c := bb.Connect(bus.Sources)
	ctx := context.Background()
	m := benchDesired()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Put(ctx, bus.BucketDesired, "0123456789abcdef0123456789abcdef", m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutWatchRoundTrip is one stage hand-off: sources puts a
// PodDesired, admission's bus.Watch delivers it decoded. Each put waits for
// its own delivery.
func BenchmarkPutWatchRoundTrip(b *testing.B) {
	bb := bustest.Start(b)
	w := bb.Connect(bus.Sources)
	r := bb.Connect(bus.Admission)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan uint64, 1)
	synced := make(chan struct{})
	go func() {
		_ = bus.Watch[schemas.PodDesired](ctx, r, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
			switch u.Kind {
			case bus.Synced:
				close(synced)
			case bus.Put:
				got <- u.Revision
			}
		})
	}()
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		b.Fatal("watch did not sync")
	}
	m := benchDesired()
	b.ReportAllocs()
	for b.Loop() {
		rev, err := w.Put(ctx, bus.BucketDesired, "0123456789abcdef0123456789abcdef", m)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case seen := <-got:
			if seen != rev {
				b.Fatalf("watch delivered revision %d, put %d", seen, rev)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("revision %d never delivered", rev)
		}
	}
}
