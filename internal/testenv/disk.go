package testenv

import "strings"

// DiskManagementOff is the configuration that turns off disk pressure and
// image GC on a test node: the eviction thresholds and image GC threshold,
// under the keys nodelet's gc section and the kubelet's
// KubeletConfiguration share, each line prefixed with indent (two spaces
// for nodelet's gc section, none for the kubelet's).
//
// A test node's filesystems are this machine's one disk, shared with the
// builds and tests beside it: at the default imagefs.available<15% a busy
// disk puts every node under DiskPressure at once, which refuses their pods
// and has the node lifecycle controller taint them all
// node.kubernetes.io/disk-pressure:NoSchedule, so nothing schedules (a CI
// run of scripts/conformance's harness test met exactly that). kind does the
// same for its nodes (its kubeadm config template: "disable disk resource
// management by default"). 0% is a threshold the kubelet ignores
// (eviction.parseThresholdStatement), image GC at 100% is off, and
// memory.available keeps its default. A test of disk pressure or image GC
// sets its own.
func DiskManagementOff(indent string) string {
	const off = `evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
`
	lines := strings.SplitAfter(off, "\n")
	return indent + strings.Join(lines[:len(lines)-1], indent)
}
