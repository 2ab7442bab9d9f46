package devices

import (
	"context"
	"log/slog"
	"testing"

	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestDRARegistration is the kubelet's ValidatePlugin and RegisterPlugin:
// the most recent service both speak is chosen (v1beta1 through its
// wrapper), a driver offering none is refused in the kubelet's words, and
// a driver is found by name until its socket goes.
func TestDRARegistration(t *testing.T) {
	p := newDRAPlugins(slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		versions []string
		service  string
		err      string
	}{
		{"both", []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}, "v1.DRAPlugin", ""},
		{"v1beta1 only", []string{"v1beta1.DRAPlugin"}, "v1beta1.DRAPlugin", ""},
		{"none known", []string{"v1alpha4.Node"}, "",
			`invalid supported gRPC versions of DRA driver plugin none known at endpoint /x/dra.sock: none of services supported by the plugin (["v1alpha4.Node"]) are supported by the kubelet (["v1.DRAPlugin" "v1beta1.DRAPlugin"])`},
		{"empty", nil, "",
			"invalid supported gRPC versions of DRA driver plugin empty at endpoint /x/dra.sock: empty list of supported gRPC services (aka supported versions)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: tc.name, Endpoint: "/x/dra.sock", SupportedVersions: tc.versions}
			err := p.Register(ctx, "/reg/"+tc.name+".sock", info)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if _, err := p.get(tc.name); err == nil || err.Error() != "DRA driver "+tc.name+" is not registered" {
					t.Fatalf("refused driver found: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.get(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if _, wrapped := c.(drapbv1beta1.V1Beta1ClientWrapper); wrapped != (tc.service == drapbv1beta1.DRAPluginService) {
				t.Fatalf("client %T for service %s", c, tc.service)
			}
			p.Deregister(ctx, "/reg/other.sock", info) // not its socket: stays
			if _, err := p.get(tc.name); err != nil {
				t.Fatal(err)
			}
			p.Deregister(ctx, "/reg/"+tc.name+".sock", info)
			if _, err := p.get(tc.name); err == nil {
				t.Fatal("still registered after its socket went")
			}
		})
	}
}

// TestDRARollingUpdate is the kubelet's store of several plugins per
// driver (the e2e "failed update" spec): a second instance of a driver on
// another socket is used while it is there; when it fails and goes, the
// first one is used again; an endpoint another plugin of the driver has is
// refused; the same registration socket registering again replaces its
// own entry.
func TestDRARollingUpdate(t *testing.T) {
	p := newDRAPlugins(slog.New(slog.DiscardHandler))
	ctx := context.Background()
	info := func(endpoint string, versions ...string) *registerapi.PluginInfo {
		return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "gpu.example.com", Endpoint: endpoint, SupportedVersions: versions}
	}
	// The old instance speaks v1beta1 only, the new v1: the client says which is in use.
	oldInfo, newInfo := info("/old/dra.sock", "v1beta1.DRAPlugin"), info("/new/dra.sock", "v1.DRAPlugin")
	inUse := func() string {
		t.Helper()
		c, err := p.get("gpu.example.com")
		if err != nil {
			return err.Error()
		}
		if _, old := c.(drapbv1beta1.V1Beta1ClientWrapper); old {
			return "old"
		}
		return "new"
	}
	if err := p.Register(ctx, "/reg/old.sock", oldInfo); err != nil {
		t.Fatal(err)
	}
	if err := p.Register(ctx, "/reg/new.sock", newInfo); err != nil {
		t.Fatal(err)
	}
	if got := inUse(); got != "new" {
		t.Fatalf("with both registered: %s in use, want the newest", got)
	}
	if err := p.Register(ctx, "/reg/thief.sock", info("/old/dra.sock", "v1.DRAPlugin")); err == nil ||
		err.Error() != "endpoint /old/dra.sock already registered for DRA driver plugin gpu.example.com" {
		t.Fatalf("another plugin's endpoint: %v", err)
	}
	p.Deregister(ctx, "/reg/new.sock", newInfo) // the new instance failed
	if got := inUse(); got != "old" {
		t.Fatalf("after the new instance went: %s, want the old one", got)
	}
	if err := p.Register(ctx, "/reg/old.sock", info("/old/dra.sock", "v1.DRAPlugin")); err != nil {
		t.Fatalf("the same socket again: %v", err)
	}
	if got := inUse(); got != "new" || len(p.drivers["gpu.example.com"]) != 1 {
		t.Fatalf("re-registration: %s in use, %d plugins, want its own entry replaced", got, len(p.drivers["gpu.example.com"]))
	}
	p.Deregister(ctx, "/reg/old.sock", oldInfo)
	if got := inUse(); got != "DRA driver gpu.example.com is not registered" {
		t.Fatalf("after the last plugin went: %s", got)
	}
}
