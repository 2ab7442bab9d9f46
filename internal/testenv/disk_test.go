package testenv

import (
	"os"
	"path/filepath"
	"testing"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/config"
)

// DiskManagementOff reads as the same thresholds in nodelet's gc section
// and in a KubeletConfiguration, and nodelet's loader takes it as valid.
func TestDiskManagementOff(t *testing.T) {
	want := map[string]string{"memory.available": "100Mi", "nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"}
	check := func(who string, hard map[string]string, high int) {
		t.Helper()
		for k, v := range want {
			if hard[k] != v {
				t.Errorf("%s: evictionHard %s = %q, want %q (all: %v)", who, k, hard[k], v, hard)
			}
		}
		if high != 100 {
			t.Errorf("%s: imageGCHighThresholdPercent = %d, want 100", who, high)
		}
	}

	path := filepath.Join(t.TempDir(), "nodelet.yaml")
	if err := os.WriteFile(path, []byte("gc:\n"+DiskManagementOff("  ")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatalf("nodelet: %v", err)
	}
	check("nodelet", cfg.GC.EvictionHard, cfg.GC.ImageGCHighThresholdPercent)

	var kc kubeletconfig.KubeletConfiguration
	if err := yaml.UnmarshalStrict([]byte(DiskManagementOff("")), &kc); err != nil {
		t.Fatalf("kubelet: %v", err)
	}
	check("kubelet", kc.EvictionHard, int(*kc.ImageGCHighThresholdPercent))
}
