package main

import "testing"

func TestDRADefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   options
		set  map[string]bool
		want options
	}{
		{"nothing given", options{focus: defaultFocus, skip: defaultSkip, containerd: 1, nodes: 2},
			nil, options{focus: draFocus, skip: draSkip, containerd: 2, nodes: 1}},
		{"focus and containerd given", options{focus: "registers plugin", skip: defaultSkip, containerd: 1, nodes: 2},
			map[string]bool{"focus": true, "containerd": true}, options{focus: "registers plugin", skip: draSkip, containerd: 1, nodes: 1}},
		{"nodes given: kept, for the cluster to refuse", options{focus: defaultFocus, skip: "x", containerd: 2, nodes: 3},
			map[string]bool{"nodes": true, "skip": true}, options{focus: draFocus, skip: "x", containerd: 2, nodes: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.in
			o.draDefaults(tc.set)
			if o.focus != tc.want.focus || o.skip != tc.want.skip || o.containerd != tc.want.containerd || o.nodes != tc.want.nodes {
				t.Errorf("got focus %q skip %q containerd %d nodes %d, want %q %q %d %d",
					o.focus, o.skip, o.containerd, o.nodes, tc.want.focus, tc.want.skip, tc.want.containerd, tc.want.nodes)
			}
		})
	}
}

func TestDRAServesBetaAPIs(t *testing.T) {
	if got := (&options{}).apiServerArgs(); got != nil {
		t.Errorf("without -dra: %q, want none", got)
	}
	if got := (&options{dra: true}).apiServerArgs(); len(got) != 1 || got[0] != draRuntimeConfig {
		t.Errorf("with -dra: %q, want %q", got, draRuntimeConfig)
	}
}
