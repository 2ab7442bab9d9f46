package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cni"
	"github.com/nodelet/nodelet/schemas"
)

// Reasons of RuntimeState and of pods waiting for the network.
const (
	reasonNetworkNotReady = "NetworkNotReady"
	reasonNetworkPlugin   = "NetworkPluginNotReady"
	reasonRuntimeDown     = "RuntimeNotReady"
)

// cniRecheck is how often an unchanged conflist is validated again (a
// plugin binary may appear or vanish without the conflist changing).
const cniRecheck = 30 * time.Second

// networkState owns the node's CNI configuration and publishes the
// runtime's and the network's readiness (the runtime bucket).
type networkState struct {
	m *Daemon
	w *bus.Writer
	// podCIDR, when set, is the pod CIDR an API server assigned to the
	// node ("" when none yet).
	podCIDR func(ctx context.Context) string

	mu             sync.Mutex
	state          schemas.RuntimeState
	checked        bool
	runtimeName    string
	runtimeVersion string
	confSum        [32]byte
	confErr        error
	confChecked    time.Time
	// runtimeCIDR is the pod CIDR last given to CRI UpdateRuntimeConfig.
	runtimeCIDR string
	// firstCheck is closed once readiness was checked.
	firstCheck chan struct{}
	firstOnce  sync.Once
}

func newNetworkState(m *Daemon, podCIDR func(context.Context) string) *networkState {
	n := &networkState{m: m, podCIDR: podCIDR, firstCheck: make(chan struct{})}
	n.w = bus.NewWriter(m.bus, bus.BucketRuntime, func() error {
		n.mu.Lock()
		st := n.state
		n.mu.Unlock()
		_, _, err := n.w.Put(context.Background(), bus.KeyRuntimeState, &st)
		return err
	})
	return n
}

func (n *networkState) setVersion(name, version string) {
	n.mu.Lock()
	n.runtimeName, n.runtimeVersion = name, version
	n.mu.Unlock()
}

// networkReady says whether pods on the pod network can be created, and
// if not, why.
func (n *networkState) networkReady() (bool, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.checked {
		return false, "the network has not been checked yet"
	}
	return n.state.NetworkReady, n.state.Message
}

// run checks and publishes readiness every relist period until ctx is done.
func (n *networkState) run(ctx context.Context) {
	period := n.m.cfg.Runtime.RelistPeriod
	if period <= 0 {
		period = time.Second
	}
	t := n.m.clock.NewTicker(period)
	defer t.Stop()
	for {
		n.check(ctx)
		n.firstOnce.Do(func() { close(n.firstCheck) })
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// check renders (when nodelet manages it) and validates the conflist, asks
// CRI Status, publishes the result, and wakes the waiting pods when the
// network just became ready.
func (n *networkState) check(ctx context.Context) {
	m := n.m
	cidr := m.cfg.Node.PodCIDR
	var cniErr error
	if n.podCIDR != nil {
		switch c := n.podCIDR(ctx); {
		case c != "":
			cidr = c
		case m.cfg.Node.PodCIDRDefaulted() && m.cfg.Runtime.ManageCNIConfig:
			// In a cluster the pod range is the Node's, as the kubelet's
			// (its podCIDR setting is for standalone nodes): a range of
			// our own, rendered before node IPAM assigned the Node one,
			// would give the first pods addresses no route leads to.
			cidr, cniErr = "", errors.New("the Node has no spec.podCIDR yet (node.podCIDR is not set)")
		}
	}
	if m.cfg.Runtime.ManageCNIConfig && cniErr == nil {
		cniErr = renderCNIConfig(m.cfg.Runtime.CNIConfDir, cni.Options{Subnet: cidr, BridgeName: m.cfg.Runtime.CNIBridgeName, NetworkName: m.cfg.Runtime.CNINetworkName})
	}
	if cniErr == nil {
		cniErr = n.validate(ctx)
	}

	var st schemas.RuntimeState
	if cidr != "" {
		n.updateRuntimeConfig(ctx, cidr)
		st.PodCIDRs = strings.Split(cidr, ",")
		st.PodCIDR = st.PodCIDRs[0]
	}
	n.mu.Lock()
	st.RuntimeName, st.RuntimeVersion = n.runtimeName, n.runtimeVersion
	n.mu.Unlock()
	st.ImageVolumes = supportsImageVolumes(st.RuntimeName, st.RuntimeVersion)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := m.rs.Status(sctx, false)
	cancel()
	var criNet *runtimeapi.RuntimeCondition
	switch {
	case err != nil:
		st.Reason, st.Message = reasonRuntimeDown, fmt.Sprintf("container runtime does not answer CRI Status: %v", err)
	default:
		for _, c := range resp.GetStatus().GetConditions() {
			switch c.Type {
			case runtimeapi.RuntimeReady:
				st.RuntimeReady = c.Status
				if !c.Status {
					st.Reason, st.Message = reasonRuntimeDown, fmt.Sprintf("container runtime not ready: %s: %s", c.Reason, c.Message)
				}
			case runtimeapi.NetworkReady:
				criNet = c
			}
		}
	}
	if st.RuntimeReady {
		switch {
		case cniErr != nil:
			st.Reason, st.Message = reasonNetworkPlugin, "network plugin not ready: "+cniErr.Error()
		case criNet == nil || !criNet.Status:
			msg := "the container runtime reports no NetworkReady condition"
			if criNet != nil {
				msg = fmt.Sprintf("NetworkReady=false reason:%s message:%s", criNet.Reason, criNet.Message)
			}
			st.Reason, st.Message = reasonNetworkPlugin, "container runtime network not ready: "+msg
		default:
			st.NetworkReady = true
		}
	}
	n.mu.Lock()
	wasReady := n.checked && n.state.NetworkReady
	wasRuntime := n.checked && n.state.RuntimeReady
	changed := !n.checked || !reflect.DeepEqual(n.state, st)
	n.state, n.checked = st, true
	n.mu.Unlock()
	if changed {
		if st.NetworkReady && st.RuntimeReady {
			m.log.Info("Runtime and network ready", "runtime", st.RuntimeName, "podCIDR", cidr)
		} else {
			m.log.Warn("Runtime or network not ready", "reason", st.Reason, "message", st.Message)
		}
	}
	if _, _, err := n.w.Put(ctx, bus.KeyRuntimeState, &st); err != nil && ctx.Err() == nil {
		m.log.Error("Cannot publish runtime state", "err", err)
	}
	if st.RuntimeReady {
		m.health(true, "")
	} else {
		m.health(false, st.Message)
	}
	if m.workers != nil && ((st.NetworkReady && !wasReady) || (st.RuntimeReady && !wasRuntime)) {
		for _, uid := range m.store.uids() {
			m.workers.Update(uid)
		}
	}
}

// updateRuntimeConfig tells the container runtime the pod CIDR(s) when
// they change, as the kubelet's updatePodCIDR (CRI UpdateRuntimeConfig;
// containerd renders its own CNI template from it when it has one).
func (n *networkState) updateRuntimeConfig(ctx context.Context, cidr string) {
	n.mu.Lock()
	same := n.runtimeCIDR == cidr
	n.mu.Unlock()
	if same {
		return
	}
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := n.m.rs.UpdateRuntimeConfig(uctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}})
	cancel()
	if err != nil {
		n.m.log.Warn("Cannot update the runtime's pod CIDR, will retry", "podCIDR", cidr, "err", err)
		return
	}
	n.m.log.Info("Updating Pod CIDR", "newPodCIDR", cidr)
	n.mu.Lock()
	n.runtimeCIDR = cidr
	n.mu.Unlock()
}

// validate checks the conflist containerd loads (the first by name in the
// conf dir) with libcni, again whenever it changed and every cniRecheck.
func (n *networkState) validate(ctx context.Context) error {
	dir := n.m.cfg.Runtime.CNIConfDir
	path, data, err := loadedConflist(dir)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(append([]byte(path+"\x00"), data...))
	n.mu.Lock()
	if sum == n.confSum && n.m.clock.Since(n.confChecked) < cniRecheck {
		err := n.confErr
		n.mu.Unlock()
		return err
	}
	n.mu.Unlock()
	err = cni.Validate(ctx, data, n.m.cfg.Runtime.CNIBinDirs)
	if err != nil {
		err = fmt.Errorf("%s: %w", path, err)
	}
	n.mu.Lock()
	n.confSum, n.confErr, n.confChecked = sum, err, n.m.clock.Now()
	n.mu.Unlock()
	return err
}

// loadedConflist returns the file containerd's CRI plugin loads from dir
// (the first .conflist, .conf or .json by name) as a conflist.
func loadedConflist(dir string) (string, []byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("no CNI configuration: %w", err)
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conflist", ".conf", ".json":
			if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
	}
	if len(names) == 0 {
		return "", nil, fmt.Errorf("no CNI configuration file in %s", dir)
	}
	sort.Strings(names)
	path := filepath.Join(dir, names[0])
	data, err := os.ReadFile(path)
	if err != nil {
		return path, nil, err
	}
	if filepath.Ext(path) != ".conflist" {
		conf, err := libcni.ConfFromBytes(data)
		if err != nil {
			return path, nil, fmt.Errorf("%s: %w", path, err)
		}
		list, err := libcni.ConfListFromConf(conf)
		if err != nil {
			return path, nil, fmt.Errorf("%s: %w", path, err)
		}
		data = list.Bytes
	}
	return path, data, nil
}

// renderCNIConfig writes nodelet's conflist for opts into dir when its
// content changed.
func renderCNIConfig(dir string, opts cni.Options) error {
	data, err := cni.Render(opts)
	if err != nil {
		return fmt.Errorf("render CNI config for pod CIDR %s: %w", opts.Subnet, err)
	}
	if old, err := os.ReadFile(filepath.Join(dir, cni.DefaultFileName)); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return cni.WriteAtomic(dir, cni.DefaultFileName, data)
}

// hostIPs is the node's address (node.address), else its first
// non-loopback IPv4 and IPv6 addresses.
func hostIPs(address string) []string {
	if address != "" {
		return []string{address}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var v4, v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil && v4 == "" {
			v4 = ipn.IP.String()
		} else if ipn.IP.To4() == nil && v6 == "" {
			v6 = ipn.IP.String()
		}
	}
	var out []string
	for _, s := range []string{v4, v6} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
