// Package kubeletcompat is `nodelet kubelet`: the kubelet's command line
// as kubeadm's systemd drop-in gives it (10-kubeadm.conf, kubeadm-flags.env)
// and its KubeletConfiguration (kubelet.config.k8s.io/v1beta1, the real
// types of k8s.io/kubelet), loaded as the kubelet v1.37.2 loads them,
// mapped onto nodelet's configuration (every field and flag honoured onto
// a nodelet key or refused by name: Table, NodeFlags, docs/kubelet-compat.md),
// written as <root-dir>/nodelet.yaml and run by the supervisor (`nodelet up`).
package kubeletcompat

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"

	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/version"
)

// ConfigName is the nodelet configuration `nodelet kubelet` writes in
// the root directory.
const ConfigName = "nodelet.yaml"

// Options are what Main needs from the command that runs it.
type Options struct {
	Stdout, Stderr io.Writer
	// Up runs the supervisor with args (`nodelet up ARGS`); it returns
	// only when it could not, with the exit code.
	Up func(args []string) int
}

// Main runs `nodelet kubelet ARGS` and returns the exit code: 0 for
// --help and --version, config.ExitCode (2) for a command line or
// configuration nodelet refuses, else what Up returns.
func Main(args []string, o Options) int {
	fail := func(err error) int {
		fmt.Fprintf(o.Stderr, "nodelet kubelet: %v\n", err)
		return config.ExitCode
	}
	l, err := Load(args, o.Stderr)
	if err != nil {
		return fail(err)
	}
	switch {
	case l.Flags.Help:
		fmt.Fprintf(o.Stdout, "nodelet kubelet runs nodelet from the kubelet's command line and KubeletConfiguration (docs/kubelet-compat.md).\n\nUsage:\n  kubelet [flags]\n\nFlags:\n%s", l.Set.FlagUsagesWrapped(100))
		return 0
	case l.Flags.Version == "raw":
		fmt.Fprintf(o.Stdout, "version.Info{GitVersion:%q, Nodelet:%q}\n", version.Kubelet(), version.Version)
		return 0
	case l.Flags.Version == "true":
		// The kubelet's verflag.PrintAndExitIfRequested: "Kubernetes
		// <GitVersion>", which kubeadm's KubeletVersionCheck parses.
		fmt.Fprintf(o.Stdout, "Kubernetes %s\n", version.Kubelet())
		return 0
	}
	path, err := Prepare(l, o.Stderr)
	if err != nil {
		return fail(err)
	}
	return o.Up([]string{"--config", path})
}

// Prepare maps l, writes the result to <root-dir>/nodelet.yaml and loads
// it back with nodelet's own loader (its validation): the path, or why not.
func Prepare(l *Loaded, stderr io.Writer) (string, error) {
	cfg, warnings, err := Map(l)
	if err != nil {
		return "", err
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "nodelet kubelet: warning: %s\n", w)
	}
	doc, err := Render(cfg, l.Config.PodCIDR != "")
	if err != nil {
		return "", err
	}
	dir := cfg.Node.StateDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, ConfigName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, doc, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	if _, err := config.LoadFile(path); err != nil {
		return "", fmt.Errorf("the nodelet configuration made from the kubelet's (%s) is not valid: %w", path, err)
	}
	return path, nil
}

// Render is cfg as a nodelet YAML document with only the keys that differ
// from nodelet's defaults (so that what is derived from a key left unset,
// such as a cluster's pod CIDR, stays so); node.podCIDR is written when
// podCIDRSet, whatever its value.
func Render(cfg *config.Config, podCIDRSet bool) ([]byte, error) {
	doc := diff(config.ToMap(cfg), config.ToMap(config.Defaults()))
	if doc == nil {
		doc = map[string]any{}
	}
	node, _ := doc["node"].(map[string]any)
	if podCIDRSet {
		if node == nil {
			node = map[string]any{}
			doc["node"] = node
		}
		node["podCIDR"] = cfg.Node.PodCIDR
	}
	if node != nil && node["taints"] != nil {
		var taints []map[string]string
		for _, t := range cfg.Node.Taints {
			taints = append(taints, map[string]string{"key": t.Key, "value": t.Value, "effect": t.Effect})
		}
		node["taints"] = taints
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by `nodelet kubelet` from the kubelet's command line and KubeletConfiguration;\n# rewritten at every start (docs/kubelet-compat.md).\n"), b...), nil
}

// diff is the part of got that is not as in def.
func diff(got, def map[string]any) map[string]any {
	var out map[string]any
	for k, v := range got {
		if sub, ok := v.(map[string]any); ok {
			if dsub, ok := def[k].(map[string]any); ok {
				if d := diff(sub, dsub); d != nil {
					if out == nil {
						out = map[string]any{}
					}
					out[k] = d
				}
				continue
			}
		}
		if !reflect.DeepEqual(v, def[k]) {
			if out == nil {
				out = map[string]any{}
			}
			out[k] = v
		}
	}
	return out
}
