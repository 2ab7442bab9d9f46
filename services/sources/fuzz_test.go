package sources

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// FuzzManifestURLBody serves arbitrary bytes as the body of the manifest
// URL (sources.manifestURL) and polls it, as nodelet-sources does: nothing
// may panic, and every pod it keeps must be one the rest of the node can
// take: a UID the bus takes as a key, the node's identity, a desired pod
// that encodes and decodes. A second poll of the same body changes nothing.
// Seeds: the manifests of testdata/manifests and testdata/fuzz/FuzzManifestURLBody.
// Longer: go test ./services/sources -run '^$' -fuzz FuzzManifestURLBody -fuzztime 10m.
func FuzzManifestURLBody(f *testing.F) {
	for _, name := range []string{"pod.yaml", "pod.json", "list.yaml"} {
		b, err := os.ReadFile("testdata/manifests/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	var body atomic.Pointer[[]byte]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(*body.Load())
	}))
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, data []byte) {
		body.Store(&data)
		var events []schemas.Event
		sp := &staticParser{nodeName: "fuzz-node", log: discardLogger(), emit: func(e schemas.Event) { events = append(events, e) }}
		s := newHTTPSource(srv.URL+"/manifest", map[string][]string{"X-Fuzz": {"1"}}, time.Minute, clock.RealClock{}, discardLogger(), sp)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pods, changed := s.poll(ctx)
		if !changed {
			t.Fatalf("the first poll sent nothing (events %v)", events)
		}
		for _, p := range pods {
			if err := bus.ValidKey(string(p.UID)); err != nil {
				t.Fatalf("kept pod %s/%s has UID %q the bus refuses: %v", p.Namespace, p.Name, p.UID, err)
			}
			if !strings.HasSuffix(p.Name, "-fuzz-node") || p.Spec.NodeName != "fuzz-node" || p.Status.Phase != corev1.PodPending {
				t.Fatalf("kept pod without the node's identity: %+v", p.ObjectMeta)
			}
			b, err := schemas.Encode(bus.Sources, &schemas.PodDesired{Pod: p, Source: schemas.SourceHTTP})
			if err != nil {
				t.Fatalf("kept pod %s does not encode: %v", p.Name, err)
			}
			if _, back, err := schemas.Decode[schemas.PodDesired](b); err != nil || back.Pod.UID != p.UID {
				t.Fatalf("kept pod %s does not decode: %v", p.Name, err)
			}
		}
		if _, again := s.poll(ctx); again {
			t.Fatal("the same body polled again changed the pods")
		}
	})
}
