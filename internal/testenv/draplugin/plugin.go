// Package draplugin is a DRA driver for tests, built on the real
// plugin-side library (k8s.io/dynamic-resource-allocation/kubeletplugin,
// what DRA drivers such as the example driver use): it registers through
// a node's plugins_registry, serves the dra v1 gRPC API, prepares each
// claim's devices of its driver by writing a CDI spec that sets an
// environment variable per device, and records every NodePrepareResources
// and NodeUnprepareResources it serves.
package draplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// CDIKind is the CDI kind of the devices the driver prepares.
const CDIKind = "nodelet.test/dra"

// Config describes the driver.
type Config struct {
	// Driver is the driver's name.
	Driver string
	// NodeName is the node it serves.
	NodeName string
	// Client reads the claims (the library fetches each claim it is asked
	// to prepare).
	Client kubernetes.Interface
	// RegistryDir is the node's <rootDir>/plugins_registry; DataDir the
	// driver's <rootDir>/plugins/<driver>, where its dra.sock goes.
	RegistryDir, DataDir string
	// CDIDir receives the CDI specs; "" writes none.
	CDIDir string
	// Fail maps a claim name to the error its preparation reports.
	Fail map[string]string
	// Health, when set, is what the driver's DRAResourceHealth service
	// reports (the library's WatchHealthStatus), again every 10s; when
	// nil the service is off.
	Health []kubeletplugin.DeviceHealth
}

// Plugin is a running driver.
type Plugin struct {
	cfg    Config
	helper *kubeletplugin.Helper

	mu         sync.Mutex
	prepared   []string // claim names, one per NodePrepareResources of it
	unprepared []string
	errs       []error
}

// Start runs the driver until Stop.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RegistryDir, 0o750); err != nil {
		return nil, err
	}
	p := &Plugin{cfg: cfg}
	h, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(cfg.Driver), kubeletplugin.NodeName(cfg.NodeName), kubeletplugin.KubeClient(cfg.Client),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistryDir), kubeletplugin.PluginDataDirectoryPath(cfg.DataDir),
		kubeletplugin.HealthService(cfg.Health != nil))
	if err != nil {
		return nil, err
	}
	p.helper = h
	return p, nil
}

// Stop stops serving and removes the sockets.
func (p *Plugin) Stop() { p.helper.Stop() }

// Prepared and Unprepared are the claims named in each call so far.
func (p *Plugin) Prepared() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.prepared)
}

func (p *Plugin) Unprepared() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.unprepared)
}

// CDIName is the CDI device ID the driver gives device of claim.
func CDIName(claim types.UID, device string) string {
	return CDIKind + "=" + string(claim) + "-" + device
}

// EnvName is the variable the CDI device sets in a container (the device
// name with '-' as '_', for a shell); its value is the claim's name.
func EnvName(device string) string { return "NODELET_DRA_" + strings.ReplaceAll(device, "-", "_") }

// PrepareResourceClaims prepares each claim's devices of this driver.
func (p *Plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		p.mu.Lock()
		p.prepared = append(p.prepared, c.Name)
		p.mu.Unlock()
		if msg, ok := p.cfg.Fail[c.Name]; ok {
			out[c.UID] = kubeletplugin.PrepareResult{Err: errors.New(msg)}
			continue
		}
		var res kubeletplugin.PrepareResult
		var devs []map[string]any
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != p.cfg.Driver {
				continue
			}
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool,
				DeviceName: r.Device, CDIDeviceIDs: []string{CDIName(c.UID, r.Device)}})
			devs = append(devs, map[string]any{"name": string(c.UID) + "-" + r.Device,
				"containerEdits": map[string]any{"env": []string{EnvName(r.Device) + "=" + c.Name}}})
		}
		if p.cfg.CDIDir != "" {
			spec, _ := json.Marshal(map[string]any{"cdiVersion": "0.6.0", "kind": CDIKind, "devices": devs})
			if err := os.WriteFile(p.specPath(c.UID), spec, 0o644); err != nil {
				out[c.UID] = kubeletplugin.PrepareResult{Err: err}
				continue
			}
		}
		out[c.UID] = res
	}
	return out, nil
}

func (p *Plugin) specPath(uid types.UID) string {
	return filepath.Join(p.cfg.CDIDir, fmt.Sprintf("nodelet-test-dra-%s.json", uid))
}

// UnprepareResourceClaims removes each claim's CDI spec.
func (p *Plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		p.mu.Lock()
		p.unprepared = append(p.unprepared, c.Name)
		p.mu.Unlock()
		if p.cfg.CDIDir != "" {
			if err := os.Remove(p.specPath(c.UID)); err != nil && !os.IsNotExist(err) {
				out[c.UID] = err
				continue
			}
		}
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError keeps background errors (ResourceSlice publishing, which
// this driver does not use).
func (p *Plugin) HandleError(_ context.Context, err error, _ string) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

// WatchHealthStatus reports Config.Health, stamped now, at once and every
// 10s (within the kubelet's 30s timeout), until ctx ends.
func (p *Plugin) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if p.cfg.Health == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	for {
		r := kubeletplugin.DeviceHealthReport{Devices: slices.Clone(p.cfg.Health)}
		for i := range r.Devices {
			r.Devices[i].LastUpdated = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case reports <- r:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
		}
	}
}
