package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Inventory lists what pods leave on a node when they go: the items
// behind the counts, so that a drained node's leftovers can be named.
type Inventory struct {
	Containers []string `json:"containers"`
	Sandboxes  []string `json:"sandboxes"`
	Mounts     []string `json:"mounts"`
	PodCgroups []string `json:"podCgroups"`
	IPs        []string `json:"ips"`
	// IPTables are the rules of the node's network namespace, but
	// kube-proxy's (KUBE-*): it keeps the Services', not the pods'.
	IPTables   []string `json:"iptables"`
	Veths      []string `json:"veths"`
	PodLogDirs []string `json:"podLogDirs"`
	PodDirs    []string `json:"podDirs"`
	// BusKeys are every bucket's live keys, <bucket>/<key> (nodelet).
	BusKeys []string `json:"busKeys,omitempty"`
	// CNINetns is machine-wide (/run/netns/cni-*): other tests' namespaces
	// may come and go beside the soak's.
	CNINetns []string `json:"cniNetnsMachineWide"`
}

// kinds pairs each kind's name with its items, in report order.
func (inv *Inventory) kinds() []struct {
	name  string
	items []string
} {
	return []struct {
		name  string
		items []string
	}{
		{"containers", inv.Containers}, {"sandboxes", inv.Sandboxes}, {"mounts", inv.Mounts},
		{"pod cgroups", inv.PodCgroups}, {"CNI IPs", inv.IPs}, {"iptables rules", inv.IPTables},
		{"veths", inv.Veths}, {"pod log dirs", inv.PodLogDirs}, {"pod dirs", inv.PodDirs},
		{"bus keys", inv.BusKeys}, {"CNI netns (machine-wide)", inv.CNINetns},
	}
}

// Leftovers is what after holds beyond before, kind by kind (an item that
// appears twice in after and once in before is left over once).
func Leftovers(before, after *Inventory) []Leftover {
	var out []Leftover
	bk := before.kinds()
	for i, k := range after.kinds() {
		had := map[string]int{}
		for _, it := range bk[i].items {
			had[it]++
		}
		var extra []string
		for _, it := range k.items {
			if had[it] > 0 {
				had[it]--
				continue
			}
			extra = append(extra, it)
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			out = append(out, Leftover{Kind: k.name, Items: extra})
		}
	}
	return out
}

// ParseIPTablesSave reads iptables-save's output into rules, each
// "<table> <rule>" (e.g. "nat -A POSTROUTING -s 10.244.0.5/32 -j CNI-…"),
// with the chains each table declares as "<table> :<chain>".
func ParseIPTablesSave(r io.Reader) (rules []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	table := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			// ":CHAIN POLICY [packets:bytes]": the name only.
			name, _, _ := strings.Cut(line[1:], " ")
			rules = append(rules, table+" :"+name)
		case strings.HasPrefix(line, "-A "):
			rules = append(rules, table+" "+line)
		default:
			return nil, fmt.Errorf("iptables-save: unexpected line %q", line)
		}
	}
	return rules, sc.Err()
}

// iptablesCounts counts the rules (not the chain declarations) of
// ParseIPTablesSave's output, and those in the CNI plugins' chains.
func iptablesCounts(rules []string) (all, cni int) {
	for _, r := range rules {
		_, rule, _ := strings.Cut(r, " ")
		if !strings.HasPrefix(rule, "-A ") {
			continue
		}
		all++
		if strings.HasPrefix(rule, "-A CNI-") {
			cni++
		}
	}
	return all, cni
}

// podRules drops kube-proxy's rules and chains: they follow the
// cluster's Services, not the node's pods.
func podRules(rules []string) []string {
	var out []string
	for _, r := range rules {
		if !strings.Contains(r, "KUBE-") {
			out = append(out, r)
		}
	}
	return out
}

// ParseMountinfo lists the mount points of a mountinfo file at or under
// any of dirs.
func ParseMountinfo(r io.Reader, dirs []string) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("mountinfo: short line %q", sc.Text())
		}
		mp := unescapeMountinfo(f[4])
		for _, d := range dirs {
			if d != "" && (mp == d || strings.HasPrefix(mp, strings.TrimSuffix(d, "/")+"/")) {
				out = append(out, mp)
				break
			}
		}
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) of a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// GoroutineTotal reads the count of a goroutine profile in its debug=1
// text form ("goroutine profile: total 42").
func GoroutineTotal(b []byte) (int, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("goroutine profile: total "))
	if !ok {
		return 0, fmt.Errorf("goroutine profile: first line %q", line)
	}
	return strconv.Atoi(string(rest))
}

// HostLocalLeases lists host-local's leases in its network's data dir:
// one file per address, named by it, holding the container's ID (and the
// interface) — "<address> <container ID, 12 characters>".
func HostLocalLeases(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err != nil || e.IsDir() {
			continue // lock, last_reserved_ip.0
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		id, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		id = strings.TrimSpace(id)
		if len(id) > 12 {
			id = id[:12]
		}
		out = append(out, e.Name()+" "+id)
	}
	return out, nil
}

// podCgroupName is a pod's cgroup as the kubelet's cgroupfs driver names
// it (pod<uid>), and as nodelet does.
var podCgroupName = regexp.MustCompile(`^pod[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}$`)

// Cgroups walks the cgroup tree at root and returns the pod cgroups (paths
// relative to root) and the number of cgroups below root.
func Cgroups(root string) (pods []string, all int, err error) {
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // a cgroup removed while we walk
			}
			return err
		}
		if !d.IsDir() || p == root {
			return nil
		}
		all++
		if podCgroupName.MatchString(d.Name()) {
			rel, _ := filepath.Rel(root, p)
			pods = append(pods, rel)
		}
		return nil
	})
	if os.IsNotExist(err) {
		err = nil
	}
	return pods, all, err
}

// dirNames lists a directory's entries (none when it does not exist).
func dirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, err
}

// cniNetns lists /run/netns's namespaces that CNI (through containerd's
// CRI) made for sandboxes.
func cniNetns() []string {
	names, _ := dirNames("/run/netns")
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "cni-") {
			out = append(out, n)
		}
	}
	return out
}
