package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// User namespaces (spec.hostUsers: false), as the kubelet's
// pkg/kubelet/userns UsernsManager with its defaults: every pod gets its
// own range of 65536 host IDs mapped to 0..65535, taken from 65536 up
// (getKubeletMappings without a "kubelet" entry in /etc/subuid), stored in
// <stateDir>/pods/<uid>/userns in the kubelet's JSON so a restarted
// runtime gives the pod the same range, and freed with the pod's
// directory. A pod asking for one on a runtime handler whose CRI status
// does not declare user namespaces (containerd before 2.0 declares no
// handlers at all) fails sandbox creation with the kubelet's message: it
// never runs in the host's user namespace.
const (
	usernsLength = 65536
	usernsFile   = "userns"
	// usernsSlots: ranges 1..usernsSlots-1 (range 0 is the host's IDs).
	usernsSlots = 1 << 16
)

// usernsMu serializes allocations (which read every pod's file).
var usernsMu sync.Mutex

// usernsMapping is the kubelet's userNamespace file format.
type usernsMapping struct {
	UIDMappings []usernsIDMapping `json:"uidMappings"`
	GIDMappings []usernsIDMapping `json:"gidMappings"`
}

type usernsIDMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// usernsOptions is the kubelet's GetOrCreateUserNamespaceMappings (with
// the UserNamespacesSupport feature on, its default): the node's user
// namespace unless spec.hostUsers is false; then the pod's own mappings if
// its runtime handler supports user namespaces, else an error.
func (m *Daemon) usernsOptions(pod *corev1.Pod) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
	}
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Runtime.RuntimeRequestTimeout)
	defer cancel()
	resp, err := m.rs.Status(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("user namespace: runtime status: %w", err)
	}
	if ok, err := handlerSupportsUserns(resp.GetRuntimeHandlers(), handler); err != nil || !ok {
		msg := "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
		if handler != "" {
			msg = fmt.Sprintf("can't set `spec.hostUsers: false`, RuntimeClass handler %q does not support user namespaces", handler)
		}
		if err != nil {
			return nil, fmt.Errorf("%v: %w", msg, err)
		}
		return nil, errors.New(msg)
	}
	mp, err := podUserns(m.cfg.Node.StateDir, string(pod.UID))
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
	for _, u := range mp.UIDMappings {
		out.Uids = append(out.Uids, &runtimeapi.IDMapping{HostId: u.HostID, ContainerId: u.ContainerID, Length: u.Length})
	}
	for _, g := range mp.GIDMappings {
		out.Gids = append(out.Gids, &runtimeapi.IDMapping{HostId: g.HostID, ContainerId: g.ContainerID, Length: g.Length})
	}
	return out, nil
}

// handlerSupportsUserns is the kubelet's HandlerSupportsUserNamespaces: a
// runtime that lists no handlers is too old for user namespaces.
func handlerSupportsUserns(handlers []*runtimeapi.RuntimeHandler, name string) (bool, error) {
	if len(handlers) == 0 {
		return false, nil
	}
	for _, h := range handlers {
		if h.Name == name {
			return h.GetFeatures().GetUserNamespaces(), nil
		}
	}
	return false, fmt.Errorf("the handler %q is not known", name)
}

// podUserns reads the pod's mappings, or allocates and stores the lowest
// free range (the kubelet's createUserNs; its file checks in
// parseUserNsFileAndRecord).
func podUserns(stateDir, uid string) (*usernsMapping, error) {
	usernsMu.Lock()
	defer usernsMu.Unlock()
	file := filepath.Join(podDir(stateDir, uid), usernsFile)
	if b, err := os.ReadFile(file); err == nil {
		mp, err := parseUserns(b)
		if err != nil {
			return nil, fmt.Errorf("user namespace: invalid user namespace mappings file: %w", err)
		}
		return mp, nil
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	used := map[uint32]bool{}
	files, _ := filepath.Glob(filepath.Join(stateDir, "pods", "*", usernsFile))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if mp, err := parseUserns(b); err == nil {
			used[mp.UIDMappings[0].HostID/usernsLength] = true
		}
	}
	slot := uint32(0)
	for i := uint32(1); i < usernsSlots; i++ {
		if !used[i] {
			slot = i
			break
		}
	}
	if slot == 0 {
		return nil, errors.New("create user namespace: could not find an empty slot to allocate a user namespace")
	}
	one := []usernsIDMapping{{HostID: slot * usernsLength, ContainerID: 0, Length: usernsLength}}
	mp := &usernsMapping{UIDMappings: one, GIDMappings: one}
	b, _ := json.Marshal(mp)
	if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return nil, fmt.Errorf("create user namespace: %w", err)
	}
	return mp, nil
}

// parseUserns checks a mappings file as the kubelet's
// parseUserNsFileAndRecord: one mapping, identical for UIDs and GIDs,
// mapping container ID 0, of the expected length and alignment.
func parseUserns(b []byte) (*usernsMapping, error) {
	var mp usernsMapping
	if err := json.Unmarshal(b, &mp); err != nil {
		return nil, err
	}
	if len(mp.UIDMappings) != 1 || len(mp.GIDMappings) != 1 {
		return nil, errors.New("invalid user namespace configuration: no more than one mapping allowed.")
	}
	u, g := mp.UIDMappings[0], mp.GIDMappings[0]
	if u != g {
		return nil, errors.New("invalid user namespace configuration: GID and UID mappings should be identical.")
	}
	if u.ContainerID != 0 {
		return nil, errors.New("invalid user namespace configuration: UID 0 must be mapped")
	}
	if u.Length != usernsLength || u.HostID%usernsLength != 0 || u.HostID == 0 {
		return nil, fmt.Errorf("wrong user namespace range %d+%d", u.HostID, u.Length)
	}
	return &mp, nil
}
