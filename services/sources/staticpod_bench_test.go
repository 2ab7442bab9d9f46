package sources

import (
	"io"
	"log/slog"
	"testing"

	"github.com/nodelet/nodelet/schemas"
)

// benchManifest is the benchmark's static pod (scripts/bench.sh's), with
// the fields a real manifest usually carries.
const benchManifest = `apiVersion: v1
kind: Pod
metadata:
  name: p000
  namespace: nodelet-bench
  labels:
    app: bench
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    ports:
    - containerPort: 8080
      name: http
    resources:
      requests: {cpu: 10m, memory: 16Mi}
      limits: {cpu: 100m, memory: 64Mi}
`

// BenchmarkDecodeManifest is the YAML decode of one manifest alone.
func BenchmarkDecodeManifest(b *testing.B) {
	data := []byte(benchManifest)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := decodeManifest(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStaticPod is everything a new manifest file goes through before
// the merge: decode, API defaults, the static pod UID (a hash of the
// pod's JSON) and identity, validation. A fresh origin each time, so the
// unchanged-content shortcut never applies.
func BenchmarkStaticPod(b *testing.B) {
	data := []byte(benchManifest)
	sp := &staticParser{nodeName: "bench", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		emit: func(e schemas.Event) { b.Fatalf("rejected: %s", e.Message) }}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		o := &origin{name: "/etc/nodelet/manifests/p000.yaml", isFile: true}
		sp.load(o, data)
		if len(o.pods) != 1 || o.pods[0].UID == "" {
			b.Fatalf("pods %+v", o.pods)
		}
	}
}

// BenchmarkStaticPodUID is the identity step alone on a decoded, defaulted
// pod: its UID hashes the pod's JSON.
func BenchmarkStaticPodUID(b *testing.B) {
	m, err := decodeManifest([]byte(benchManifest))
	if err != nil || len(m.Pods) != 1 {
		b.Fatalf("decode: %v", err)
	}
	setPodDefaults(m.Pods[0])
	b.ReportAllocs()
	for b.Loop() {
		p := m.Pods[0].DeepCopy()
		staticPod(p, "/etc/nodelet/manifests/p000.yaml", true, "bench")
		if p.UID == "" {
			b.Fatal("no UID")
		}
	}
}
