// Package nodestatus holds the kubelet's node facts that more than one
// daemon needs, so that two daemons cannot disagree on them:
//
//   - the node's capacity, read once from cAdvisor's MachineInfo and the
//     state dir's filesystem (the kubelet's nodestatus.MachineInfo setter);
//   - its allocatable, capacity less node.kubeReserved, node.systemReserved
//     and the hard eviction thresholds (the kubelet's
//     GetNodeAllocatableReservation), with one rule for a bad reservation:
//     an error, as the kubelet refuses to start on it;
//   - the pressure conditions' reasons, messages and events (the kubelet's
//     nodestatus.MemoryPressureCondition, DiskPressureCondition and
//     PIDPressureCondition).
//
// nodelet-admission decides on the allocatable nodelet-status reports,
// nodelet-runtime defaults downward-API limits to it, nodelet-gc writes
// the pressure conditions nodelet-status posts.
package nodestatus
