package kubeletcompat

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nodelet/nodelet/internal/config"
)

// /configz shows nodelet's configuration as a KubeletConfiguration that,
// given back to nodelet, runs it the same: for each configuration, every
// nodelet key an honoured field maps onto round-trips, and no honoured
// field is left out.
func TestConfigzRoundTrips(t *testing.T) {
	custom := write(t, t.TempDir(), "custom.yaml", header+`serializeImagePulls: false
maxParallelImagePulls: 3
registerWithTaints:
- {key: dedicated, value: edge, effect: NoSchedule}
evictionHard:
  memory.available: 300Mi
kubeAPIQPS: 25
syncFrequency: 45s
healthzPort: 0
clusterDNS: [10.96.0.10, 10.96.0.11]
staticPodURL: http://127.0.0.1:8000/pods
staticPodURLHeader:
  Authorization: [Bearer secret]
`)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"kubeadm", []string{"--config", "testdata/kubeadm-config.yaml", "--healthz-port=10249"}},
		{"custom", []string{"--config", custom}},
		{"serialized pulls", []string{"--config", write(t, t.TempDir(), "s.yaml", header+"serializeImagePulls: true\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, _, err := load(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			kc, unshown := Configz(c1)
			if len(unshown) > 0 {
				t.Errorf("honoured fields left out of /configz: %v", unshown)
			}
			if h := kc.StaticPodURLHeader["Authorization"]; len(h) > 0 && h[0] != "[redacted]" {
				t.Errorf("staticPodURLHeader shown as %v, want redacted", h)
			}
			kc.APIVersion, kc.Kind = "kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"
			kc.StaticPodURLHeader = c1.Sources.ManifestURLHeader // what the redaction hid
			b, err := json.Marshal(kc)
			if err != nil {
				t.Fatal(err)
			}
			c2, _, err := load(t, "--config", write(t, t.TempDir(), "configz.json", string(b)))
			if err != nil {
				t.Fatalf("the /configz KubeletConfiguration does not load back: %v", err)
			}
			for _, f := range Table {
				if f.Class != Honoured || f.Key == "" {
					continue
				}
				v1, _ := config.Value(c1, f.Key)
				v2, _ := config.Value(c2, f.Key)
				if !reflect.DeepEqual(v1, v2) && !(empty(reflect.ValueOf(v1)) && empty(reflect.ValueOf(v2))) {
					t.Errorf("%s (from %s): %v through /configz, want %v", f.Key, f.Path, v2, v1)
				}
			}
		})
	}
}
