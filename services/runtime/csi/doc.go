// Package csi is nodelet-runtime's side of CSI, as the kubelet's CSI volume
// plugin and plugin manager: node plugins register through the kubelet's
// plugin-registration protocol, and the volume manager (package volumes)
// calls them to stage and publish volumes.
//
// Registration (the kubelet's pluginmanager + csi RegistrationHandler): a
// plugin such as csi-node-driver-registrar puts a unix socket into
// <stateDir>/plugins_registry that serves
// k8s.io/kubelet/pkg/apis/pluginregistration/v1. The Registry notices it
// (fsnotify, and a rescan every second), calls GetInfo, checks the type is
// CSIPlugin and that a 1.x CSI version is offered, calls the driver's
// NodeGetInfo and NodeGetCapabilities on the endpoint GetInfo named, writes
// the driver's node ID, topology keys and attach limit
// (max_volumes_per_node) into the node's CSINode object (the node ID also
// into the Node's csi.volume.kubernetes.io/nodeid annotation, the topology
// as Node labels) and answers NotifyRegistrationStatus. A socket that goes away deregisters its driver
// (and removes it from CSINode). After a restart of nodelet-runtime every
// socket still in the directory is registered again.
package csi
