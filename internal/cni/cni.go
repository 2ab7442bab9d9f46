// Package cni renders and checks the node's CNI configuration.
//
// containerd's CRI plugin calls CNI for every pod sandbox; nodelet owns the
// conflist it reads. Render writes a bridge network for the node's pod CIDR
// (bridge + host-local IPAM, masquerade, hairpin, then portmap for hostPorts);
// Validate checks a conflist against the plugins installed on the node with
// libcni; WriteAtomic puts it in place without a reader ever seeing half a file.
//
// Loopback: containerd 1.6 brings up lo in every sandbox itself, with the
// loopback plugin from its bin_dir, so the conflist does not list it;
// CheckPlugins(ctx, binDirs, version, "loopback") checks that it is there.
package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// DefaultCNIVersion is the config version rendered: the newest that Debian
// 12's containernetworking-plugins (1.1.1) and containerd 1.6 both speak.
const DefaultCNIVersion = "1.0.0"

// Defaults of Options.
const (
	DefaultNetworkName = "nodelet"
	DefaultBridgeName  = "nodelet0"
	DefaultFileName    = "10-nodelet.conflist"
)

// Options of the node's bridge network.
type Options struct {
	// NetworkName is the conflist's name (also host-local's state dir name).
	// Default: nodelet.
	NetworkName string
	// BridgeName is the Linux bridge the pods attach to (at most 15
	// characters). Default: nodelet0.
	BridgeName string
	// Subnet is the pod CIDR, e.g. 10.88.0.0/16, or two (IPv4 and IPv6,
	// dual stack) separated by a comma, as the kubelet passes a Node's
	// spec.podCIDRs to the runtime. Required.
	Subnet string
	// CNIVersion of the conflist. Default: DefaultCNIVersion.
	CNIVersion string
	// IPAMDataDir is where host-local keeps its leases. Default: the
	// plugin's own (/var/lib/cni/networks).
	IPAMDataDir string
}

// ifName is what the kernel accepts as a link name.
var ifName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// networkName is what libcni accepts (it names files with it).
var networkName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// The conflist's JSON, in the order people expect to read it.
type (
	conflist struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []any  `json:"plugins"`
	}
	bridgePlugin struct {
		Type        string    `json:"type"`
		Bridge      string    `json:"bridge"`
		IsGateway   bool      `json:"isGateway"`
		IPMasq      bool      `json:"ipMasq"`
		HairpinMode bool      `json:"hairpinMode"`
		IPAM        hostLocal `json:"ipam"`
	}
	hostLocal struct {
		Type    string      `json:"type"`
		Ranges  [][]ipRange `json:"ranges"`
		Routes  []route     `json:"routes"`
		DataDir string      `json:"dataDir,omitempty"`
	}
	ipRange struct {
		Subnet string `json:"subnet"`
	}
	route struct {
		Dst string `json:"dst"`
	}
	portmapPlugin struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
	}
)

// Render returns the conflist for opts.
func Render(opts Options) ([]byte, error) {
	if opts.NetworkName == "" {
		opts.NetworkName = DefaultNetworkName
	}
	if opts.BridgeName == "" {
		opts.BridgeName = DefaultBridgeName
	}
	if opts.CNIVersion == "" {
		opts.CNIVersion = DefaultCNIVersion
	}
	if !networkName.MatchString(opts.NetworkName) {
		return nil, fmt.Errorf("network name %q: only letters, digits, '_', '.', '-' allowed", opts.NetworkName)
	}
	if !ifName.MatchString(opts.BridgeName) {
		return nil, fmt.Errorf("bridge name %q: 1 to 15 letters, digits, '_', '.', '-'", opts.BridgeName)
	}
	if opts.Subnet == "" {
		return nil, errors.New("subnet: required (the node's pod CIDR, e.g. 10.88.0.0/16)")
	}
	prefixes, err := parseSubnets(opts.Subnet)
	if err != nil {
		return nil, err
	}
	var ranges [][]ipRange
	var routes []route
	for _, p := range prefixes {
		ranges = append(ranges, []ipRange{{Subnet: p.String()}})
		if p.Addr().Is4() {
			routes = append(routes, route{Dst: "0.0.0.0/0"})
		} else {
			routes = append(routes, route{Dst: "::/0"})
		}
	}

	conf := conflist{
		CNIVersion: opts.CNIVersion,
		Name:       opts.NetworkName,
		Plugins: []any{
			bridgePlugin{
				Type:        "bridge",
				Bridge:      opts.BridgeName,
				IsGateway:   true,
				IPMasq:      true,
				HairpinMode: true,
				IPAM: hostLocal{
					Type:    "host-local",
					Ranges:  ranges,
					Routes:  routes,
					DataDir: opts.IPAMDataDir,
				},
			},
			portmapPlugin{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// parseSubnets reads the pod CIDRs: one, or two of different families
// (dual stack) separated by a comma, the form in which the kubelet hands
// a Node's spec.podCIDRs to the runtime (updatePodCIDR).
func parseSubnets(subnets string) ([]netip.Prefix, error) {
	parts := strings.Split(subnets, ",")
	if len(parts) > 2 {
		return nil, fmt.Errorf("subnet %q: at most two pod CIDRs (one IPv4, one IPv6)", subnets)
	}
	var out []netip.Prefix
	for _, s := range parts {
		s = strings.TrimSpace(s)
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("subnet %q: %w", s, err)
		}
		if prefix != prefix.Masked() {
			return nil, fmt.Errorf("subnet %q: host bits set (did you mean %s?)", s, prefix.Masked())
		}
		if max := prefix.Addr().BitLen() - 2; prefix.Bits() > max {
			return nil, fmt.Errorf("subnet %q: too small for a gateway and pods (at most /%d)", s, max)
		}
		if len(out) == 1 && out[0].Addr().Is4() == prefix.Addr().Is4() {
			return nil, fmt.Errorf("subnet %q: two pod CIDRs must be one IPv4 and one IPv6 (dual stack)", subnets)
		}
		out = append(out, prefix)
	}
	return out, nil
}

// Validate parses a conflist with libcni and checks that every plugin it
// names is in one of binDirs and supports the conflist's cniVersion (asked
// with the CNI VERSION command). The error names each missing or
// unsupporting plugin.
func Validate(ctx context.Context, confBytes []byte, binDirs []string) error {
	list, err := libcni.NetworkConfFromBytes(confBytes)
	if err != nil {
		return err
	}
	if list.CNIVersion == "" {
		return fmt.Errorf("conflist %q: no cniVersion", list.Name)
	}
	if len(list.Plugins) == 0 {
		return fmt.Errorf("conflist %q: no plugins", list.Name)
	}
	var types []string
	for i, p := range list.Plugins {
		if p.Network == nil || p.Network.Type == "" {
			return fmt.Errorf("conflist %q: plugin %d has no type", list.Name, i)
		}
		types = append(types, p.Network.Type)
	}
	if err := CheckPlugins(ctx, binDirs, list.CNIVersion, types...); err != nil {
		return fmt.Errorf("conflist %q: %w", list.Name, err)
	}
	return nil
}

// CheckPlugins checks that each named plugin is in binDirs and supports
// cniVersion. All problems are reported, one per plugin.
func CheckPlugins(ctx context.Context, binDirs []string, cniVersion string, plugins ...string) error {
	if len(binDirs) == 0 {
		return errors.New("no CNI bin dirs given")
	}
	c := libcni.NewCNIConfig(binDirs, nil)
	var errs []error
	var seen []string
	for _, name := range plugins {
		if slices.Contains(seen, name) {
			continue
		}
		seen = append(seen, name)
		info, err := c.GetVersionInfo(ctx, name)
		if err != nil {
			if isNotFound(name, binDirs) {
				errs = append(errs, fmt.Errorf("plugin %q: not found in %s", name, strings.Join(binDirs, ", ")))
			} else {
				errs = append(errs, fmt.Errorf("plugin %q: VERSION failed: %w", name, err))
			}
			continue
		}
		if !slices.Contains(info.SupportedVersions(), cniVersion) {
			errs = append(errs, fmt.Errorf("plugin %q does not support cniVersion %s (it supports %s)",
				name, cniVersion, strings.Join(info.SupportedVersions(), ", ")))
		}
	}
	return errors.Join(errs...)
}

func isNotFound(name string, binDirs []string) bool {
	for _, d := range binDirs {
		if fi, err := os.Stat(filepath.Join(d, name)); err == nil && !fi.IsDir() {
			return false
		}
	}
	return true
}

// WriteAtomic writes data to dir/fileName through a temporary file in dir
// and a rename, so containerd's watcher never reads a partial conflist. The
// temporary file's name does not end in .conflist/.conf/.json, so it is
// never loaded by itself.
func WriteAtomic(dir, fileName string, data []byte) error {
	if fileName == "" || fileName != filepath.Base(fileName) {
		return fmt.Errorf("file name %q: must be a plain name", fileName)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+fileName+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, fileName))
}
