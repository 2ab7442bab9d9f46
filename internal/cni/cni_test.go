package cni

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// debianBinDir holds Debian 12's containernetworking-plugins.
const debianBinDir = "/usr/lib/cni"

func TestRender(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		errContains string
	}{
		{name: "defaults", opts: Options{Subnet: "10.88.0.0/16"}},
		{name: "all set", opts: Options{NetworkName: "nlt7", BridgeName: "nlt7", Subnet: "10.200.7.0/24", CNIVersion: "0.4.0", IPAMDataDir: "/tmp/x"}},
		{name: "no subnet", opts: Options{}, errContains: "subnet: required"},
		{name: "bad subnet", opts: Options{Subnet: "10.88.0.0"}, errContains: `subnet "10.88.0.0"`},
		{name: "host bits", opts: Options{Subnet: "10.88.0.1/16"}, errContains: "did you mean 10.88.0.0/16"},
		{name: "ipv6", opts: Options{Subnet: "fd00::/64"}},
		{name: "dual stack", opts: Options{Subnet: "10.88.0.0/16,fd00:88::/64"}},
		{name: "two of a family", opts: Options{Subnet: "10.88.0.0/16,10.89.0.0/16"}, errContains: "one IPv4 and one IPv6"},
		{name: "three", opts: Options{Subnet: "10.88.0.0/16,fd00::/64,10.9.0.0/16"}, errContains: "at most two"},
		{name: "ipv6 too small", opts: Options{Subnet: "fd00::/127"}, errContains: "at most /126"},
		{name: "too small", opts: Options{Subnet: "10.88.0.0/31"}, errContains: "too small"},
		{name: "long bridge", opts: Options{Subnet: "10.88.0.0/16", BridgeName: "a-very-long-bridge"}, errContains: "bridge name"},
		{name: "bad network name", opts: Options{Subnet: "10.88.0.0/16", NetworkName: "a/b"}, errContains: "network name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Render(tt.opts)
			if tt.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errContains) {
					t.Fatalf("Render(%+v) error = %v, want it to contain %q", tt.opts, err, tt.errContains)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			list, err := libcni.NetworkConfFromBytes(b)
			if err != nil {
				t.Fatalf("libcni cannot parse the rendered conflist: %v\n%s", err, b)
			}
			want := tt.opts
			if want.NetworkName == "" {
				want.NetworkName = DefaultNetworkName
			}
			if want.BridgeName == "" {
				want.BridgeName = DefaultBridgeName
			}
			if want.CNIVersion == "" {
				want.CNIVersion = DefaultCNIVersion
			}
			if list.Name != want.NetworkName || list.CNIVersion != want.CNIVersion {
				t.Errorf("name, version = %q, %q; want %q, %q", list.Name, list.CNIVersion, want.NetworkName, want.CNIVersion)
			}
			if len(list.Plugins) != 2 || list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != "portmap" {
				t.Fatalf("plugins = %s, want bridge then portmap", b)
			}
			if !list.Plugins[1].Network.Capabilities["portMappings"] {
				t.Errorf("portmap lacks the portMappings capability")
			}
			var bridge struct {
				Bridge      string `json:"bridge"`
				IsGateway   bool   `json:"isGateway"`
				IPMasq      bool   `json:"ipMasq"`
				HairpinMode bool   `json:"hairpinMode"`
				IPAM        struct {
					Type    string                `json:"type"`
					Ranges  [][]map[string]string `json:"ranges"`
					Routes  []map[string]string   `json:"routes"`
					DataDir string                `json:"dataDir"`
				} `json:"ipam"`
			}
			if err := json.Unmarshal(list.Plugins[0].Bytes, &bridge); err != nil {
				t.Fatal(err)
			}
			if bridge.Bridge != want.BridgeName || !bridge.IsGateway || !bridge.IPMasq || !bridge.HairpinMode {
				t.Errorf("bridge plugin = %+v", bridge)
			}
			if bridge.IPAM.Type != "host-local" || bridge.IPAM.DataDir != want.IPAMDataDir {
				t.Errorf("ipam = %+v", bridge.IPAM)
			}
			// One range (and default route) per pod CIDR, in order.
			subnets := strings.Split(want.Subnet, ",")
			if len(bridge.IPAM.Ranges) != len(subnets) || len(bridge.IPAM.Routes) != len(subnets) {
				t.Fatalf("ipam = %+v, want a range for each of %v", bridge.IPAM, subnets)
			}
			for i, sn := range subnets {
				dst := "0.0.0.0/0"
				if strings.Contains(sn, ":") {
					dst = "::/0"
				}
				if bridge.IPAM.Ranges[i][0]["subnet"] != sn || bridge.IPAM.Routes[i]["dst"] != dst {
					t.Errorf("ipam range %d = %v route %v, want %s via %s", i, bridge.IPAM.Ranges[i], bridge.IPAM.Routes[i], sn, dst)
				}
			}
		})
	}
}

// fakePlugin writes a plugin that answers VERSION with the given versions.
func fakePlugin(t *testing.T, dir, name string, versions ...string) {
	t.Helper()
	vs, _ := json.Marshal(versions)
	script := "#!/bin/sh\necho '{\"cniVersion\":\"0.4.0\",\"supportedVersions\":" + string(vs) + "}'\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func testConflist(version string, plugins ...string) []byte {
	var ps []map[string]any
	for _, p := range plugins {
		ps = append(ps, map[string]any{"type": p})
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": version, "name": "test", "plugins": ps})
	return b
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	fakePlugin(t, dir, "new", "0.3.1", "0.4.0", "1.0.0")
	fakePlugin(t, dir, "old", "0.3.0", "0.3.1")
	tests := []struct {
		name        string
		conf        []byte
		errContains []string
	}{
		{name: "ok", conf: testConflist("1.0.0", "new")},
		{name: "old plugin, old version", conf: testConflist("0.3.1", "new", "old")},
		{name: "unsupported version", conf: testConflist("1.0.0", "new", "old"), errContains: []string{`plugin "old" does not support cniVersion 1.0.0`}},
		{name: "missing", conf: testConflist("1.0.0", "new", "ghost"), errContains: []string{`plugin "ghost": not found in ` + dir}},
		{name: "both problems", conf: testConflist("1.0.0", "ghost", "old"), errContains: []string{`"ghost"`, `"old"`}},
		{name: "not json", conf: []byte("{"), errContains: []string{"error parsing configuration list"}},
		{name: "no name", conf: []byte(`{"cniVersion":"1.0.0","plugins":[{"type":"new"}]}`), errContains: []string{"no name"}},
		{name: "no plugins", conf: []byte(`{"cniVersion":"1.0.0","name":"x","plugins":[]}`), errContains: []string{"no plugins"}},
		{name: "no version", conf: []byte(`{"name":"x","plugins":[{"type":"new"}]}`), errContains: []string{"no cniVersion"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(context.Background(), tt.conf, []string{dir})
			if len(tt.errContains) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate succeeded, want an error containing %q", tt.errContains)
			}
			for _, s := range tt.errContains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// TestValidateDebianPlugins checks the rendered config and a broken one
// against the real plugins of Debian's containernetworking-plugins.
func TestValidateDebianPlugins(t *testing.T) {
	if _, err := os.Stat(filepath.Join(debianBinDir, "bridge")); err != nil {
		t.Fatalf("the CNI plugins are not installed (run scripts/setup.sh): %v", err)
	}
	ctx := context.Background()
	conf, err := Render(Options{Subnet: "10.88.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(ctx, conf, []string{debianBinDir}); err != nil {
		t.Fatalf("the rendered conflist does not validate against %s: %v", debianBinDir, err)
	}
	if err := CheckPlugins(ctx, []string{debianBinDir}, DefaultCNIVersion, "loopback"); err != nil {
		t.Fatalf("loopback (what containerd needs for lo): %v", err)
	}
	bad := []byte(strings.Replace(string(conf), `"type": "portmap"`, `"type": "nodelet-no-such-plugin"`, 1))
	err = Validate(ctx, bad, []string{"/nonexistent", debianBinDir})
	if err == nil || !strings.Contains(err.Error(), `plugin "nodelet-no-such-plugin": not found`) {
		t.Fatalf("Validate of a conflist naming a missing plugin: %v", err)
	}
	future := []byte(strings.Replace(string(conf), `"cniVersion": "1.0.0"`, `"cniVersion": "1.1.0"`, 1))
	err = Validate(ctx, future, []string{debianBinDir})
	if err == nil || !strings.Contains(err.Error(), `plugin "bridge" does not support cniVersion 1.1.0`) {
		t.Fatalf("Validate of a 1.1.0 conflist: %v", err)
	}
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	if err := WriteAtomic(dir, "10-x.conflist", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(dir, "10-x.conflist", []byte("two")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "10-x.conflist"))
	if err != nil || string(b) != "two" {
		t.Fatalf("content = %q, %v; want two", b, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d files, want 1 (no temp left behind)", len(entries))
	}
	if err := WriteAtomic(dir, "../escape", nil); err == nil {
		t.Fatal("WriteAtomic accepted a path as file name")
	}
}
