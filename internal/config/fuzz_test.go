package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzConfigFile loads arbitrary bytes as the node's configuration file:
// nothing may panic; a file is either refused with an *Error naming what is
// wrong, or gives a configuration that validates and that `nodelet config
// show` can print and load back as the same. Seeds: deploy/nodelet.yaml,
// a few sections, and testdata/fuzz/FuzzConfigFile. Longer: go test
// ./internal/config -run '^$' -fuzz FuzzConfigFile -fuzztime 10m.
func FuzzConfigFile(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nodelet.yaml")); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"", "node:\n  name: n1\n  maxPods: 20\n",
		"server:\n  tlsMinVersion: VersionTLS13\n  authorization:\n    strictStreamingVerbs: true\n",
		"gc:\n  evictionHard: {memory.available: 5%}\n", "bus:\n  maxStore: 4Gi\n  eventsMaxBytes: 64Mi\n",
		"memory:\n  limits: {bus: 256Mi}\n", "node: [\n", "node:\n  kubeReserved: {cpu: 100m, memory: 1Gi}\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "nodelet.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadFile(p)
		if err != nil {
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("refused without naming a key or problem: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded but does not validate: %v", err)
		}
		shown, err := yaml.Marshal(ToMap(cfg))
		if err != nil {
			t.Fatalf("config show: %v", err)
		}
		if err := os.WriteFile(p, shown, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := LoadFile(p)
		if err != nil {
			t.Fatalf("what config show prints does not load: %v\n%s", err, shown)
		}
		if b, _ := yaml.Marshal(ToMap(again)); string(b) != string(shown) {
			t.Fatalf("config show, loaded again, differs:\n%s\n---\n%s", shown, b)
		}
	})
}
