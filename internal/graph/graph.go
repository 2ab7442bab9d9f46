// Package graph declares nodelet's processes and what each needs, once. The
// supervisor starts them in this order, and the systemd units and the
// docker-compose file are generated from the same declaration.
package graph

import (
	"fmt"
	"sort"
)

// Component is one nodelet process.
type Component struct {
	// Name is the short name: bus, sources, ...; the binary is nodelet-<Name>.
	Name string
	// Requires lists the components that must be ready before this starts.
	Requires []string
	// NeedsCRI: the component talks to the container runtime.
	NeedsCRI bool
	// NeedsAPI: the component talks to kube-apiserver when one is configured.
	NeedsAPI bool
	// Description is one line for units and listings.
	Description string
	// Root says why the component must run as root. Empty: it runs as its
	// own user, User(), in Group, under the systemd units and under
	// `nodelet up` as root with supervisor.componentUsers.
	Root []string
	// OwnDirs are the parts of the state dir (relative to it) a component
	// of its own user owns besides RunDir: made for it, 0700 or 0750.
	OwnDirs []string
}

// Binary is the executable name.
func (c Component) Binary() string { return "nodelet-" + c.Name }

// Group is the group of every daemon that runs as its own user; it may
// reach their sockets.
const Group = "nodelet"

// User is the OS user the component runs as, or "" for root.
func (c Component) User() string {
	if len(c.Root) > 0 {
		return ""
	}
	return "nodelet-" + c.Name
}

// RunDir is the component's own directory under the state dir, relative
// to it: its lock file and its sockets (internal/daemon).
func (c Component) RunDir() string { return "run/" + c.Name }

// criRoot is why a daemon that talks to CRI runs as root.
var criRoot = []string{
	"containerd's CRI socket is root's (0660 root:root); whoever may use it may",
	"run any container, so a user of its own would hide nothing from it.",
}

func because(lines ...string) []string { return append(lines, criRoot...) }

// Components lists every process nodelet runs. Order here does not matter:
// Order() computes the start order from Requires.
var Components = []Component{
	{Name: "bus", Description: "nodelet bus (embedded NATS with JetStream)",
		OwnDirs: []string{"bus", "credentials"}},
	{Name: "sources", Requires: []string{"bus"}, NeedsAPI: true, Description: "nodelet pod sources (static files, URL, API server)"},
	{Name: "admission", Requires: []string{"bus", "sources"}, NeedsAPI: true, Description: "nodelet pod admission"},
	{Name: "runtime", Requires: []string{"bus", "admission"}, NeedsCRI: true, NeedsAPI: true, Description: "nodelet pod runtime over CRI",
		Root: []string{
			"It creates sandboxes and containers over CRI, mounts volumes and",
			"prepares them for any user, and creates, limits and removes pod cgroups,",
			"as the kubelet does.",
		}},
	{Name: "prober", Requires: []string{"bus", "runtime"}, NeedsCRI: true, Description: "nodelet probes",
		Root: because("Exec probes run through CRI:")},
	{Name: "status", Requires: []string{"bus", "runtime"}, NeedsCRI: true, NeedsAPI: true, Description: "nodelet pod and node status, Lease and events",
		Root: because("The runtime's version and the node's images come over CRI:")},
	{Name: "server", Requires: []string{"bus", "runtime"}, NeedsCRI: true, NeedsAPI: true, Description: "nodelet kubelet API (logs, exec, attach, port-forward, stats, metrics, read-only port) on :10250",
		Root: because(
			"It reads container logs, which containerd writes 0640 root, and exec,",
			"attach, port-forward and container stats go through CRI:")},
	{Name: "gc", Requires: []string{"bus", "runtime"}, NeedsCRI: true, Description: "nodelet garbage collection and eviction",
		Root: because(
			"It removes pod logs and measures volumes of any user, and removes",
			"containers and images over CRI:")},
}

// Get returns the named component.
func Get(name string) (Component, bool) {
	for _, c := range Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// Order returns the components in a start order that respects Requires;
// ties keep the declaration order. It fails on unknown names and cycles.
func Order(cs []Component) ([]Component, error) {
	index := map[string]int{}
	for i, c := range cs {
		index[c.Name] = i
	}
	indeg := make([]int, len(cs))
	for i, c := range cs {
		for _, r := range c.Requires {
			if _, ok := index[r]; !ok {
				return nil, fmt.Errorf("graph: %s requires unknown component %s", c.Name, r)
			}
			indeg[i]++
		}
	}
	var out []Component
	done := map[string]bool{}
	for len(out) < len(cs) {
		var ready []int
		for i, c := range cs {
			if done[c.Name] {
				continue
			}
			ok := true
			for _, r := range c.Requires {
				ok = ok && done[r]
			}
			if ok {
				ready = append(ready, i)
			}
		}
		if len(ready) == 0 {
			return nil, fmt.Errorf("graph: dependency cycle among the remaining components")
		}
		sort.Ints(ready)
		c := cs[ready[0]]
		done[c.Name] = true
		out = append(out, c)
	}
	return out, nil
}

// StartOrder is Order(Components); the declaration is known to be valid.
func StartOrder() []Component {
	o, err := Order(Components)
	if err != nil {
		panic(err)
	}
	return o
}
