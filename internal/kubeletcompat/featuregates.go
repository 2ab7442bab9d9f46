package kubeletcompat

//go:generate sh -c "cd ../../scripts/k8s && go run ./kubeletgates v1.37.2 ../../internal/kubeletcompat/featuregates_gen.go"

import (
	"fmt"
	"sort"

	"k8s.io/component-base/featuregate"
)

// newGates is the kubelet's feature gate with every gate it knows
// (featuregates_gen.go) at its default.
func newGates() featuregate.MutableFeatureGate {
	g := featuregate.NewFeatureGate()
	if err := g.Add(kubeletGates); err != nil {
		panic(fmt.Sprintf("kubelet feature gates: %v", err))
	}
	return g
}

// gatesFrom validates m as the kubelet does (an unknown gate, or one
// locked to its default set otherwise, is an error naming it) and returns
// the gates with m applied.
func gatesFrom(m map[string]bool) (featuregate.FeatureGate, error) {
	g := newGates()
	if err := g.SetFromMap(m); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	return g, nil
}

// changedGates are the gates of m set to other than their default: each
// asks for a behaviour of the kubelet's that nodelet has not been shown
// to have, so each is refused by name (honouredGates lists the
// exceptions). AllAlpha and AllBeta count when true.
func changedGates(m map[string]bool) []string {
	var out []string
	for name, v := range m {
		if honouredGates[name] {
			continue
		}
		spec, ok := kubeletGates[featuregate.Feature(name)]
		if (!ok && v) || (ok && spec.Default != v) {
			out = append(out, fmt.Sprintf("%s=%v", name, v))
		}
	}
	sort.Strings(out)
	return out
}

// honouredGates are the gates nodelet follows set either way: those that
// only change a KubeletConfiguration default, which setDefaults applies.
var honouredGates = map[string]bool{
	"KubeletCrashLoopBackOffMax": true,
}
