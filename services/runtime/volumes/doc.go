// Package volumes is nodelet-runtime's volume manager: the kubelet's
// volume manager, secret manager and configMap manager in one place.
//
// Before a pod's containers start, Setup prepares each of its volumes on
// the host and returns their host paths, which the runtime hands to CRI
// as mounts. The layout is the kubelet's:
//
//	<stateDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>
//	<stateDir>/pods/<uid>/volumes/kubernetes.io~configmap/<name>
//	<stateDir>/pods/<uid>/volumes/kubernetes.io~secret/<name>        (tmpfs)
//	<stateDir>/pods/<uid>/volumes/kubernetes.io~downward-api/<name>  (tmpfs)
//	<stateDir>/pods/<uid>/volumes/kubernetes.io~projected/<name>     (tmpfs)
//	<stateDir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>
//
// emptyDir (disk, or tmpfs for medium Memory sized as the kubelet does),
// hostPath (with the type checks; refused for static pods when the node
// says so), configMap, secret, downwardAPI and projected volumes
// (configMaps, secrets, downwardAPI and service account tokens from the
// TokenRequest API) are supported. Everything that may hold a secret lives
// on tmpfs and never touches the disk.
//
// Files of configMap, secret, downwardAPI and projected volumes are written
// with AtomicWriter, the kubelet's "..data" symlink swap, so a reader in
// the container sees either the old or the new version of every file,
// never half of one. While a pod runs, Run keeps them current: with the
// Watch strategy (runtime.configMapAndSecretChangeDetectionStrategy) every
// referenced configMap and secret is watched on its own (a list/watch with
// fieldSelector metadata.name=<name>, which the Node authorizer allows for
// objects the node's pods reference) and a change is written at once;
// every runtime.syncFrequency all such volumes are rewritten from the
// current objects (Cache: a TTL cache; Get: a fresh GET) and downward API
// values; service account tokens are requested again at 80 % of their
// lifetime.
//
// Projected volumes also carry clusterTrustBundle and podCertificate
// sources, as the kubelet's (trustbundle.go, podcert.go). Trust bundles are
// read through an informer on the newest version of certificates.k8s.io
// that serves them, started on first use; the anchors of a name, or of a
// signer and label selector, are written once each, and a non-optional
// source that matches nothing fails the volume (the pod waits). For a
// podCertificate source the node makes a private key and a
// PodCertificateRequest for it, naming the pod, its service account and the
// node by UID; the pod waits until a signer issues it, then the key and
// chain are the source's files, renewed from beginRefreshAt. A request
// that is denied or fails is final for the pod. Keys live in memory and on
// the volume's tmpfs only, so a restarted runtime asks again.
//
// subPath mounts follow the kubelet's pkg/volume/util/subpath: the path is
// resolved inside the volume, opened component by component without
// following symlinks, and the opened file is bind-mounted, so neither
// ".." nor a symlink (even one swapped in later) can reach outside the
// volume.
//
// # Claims and CSI (pv.go, csi*.go)
//
// persistentVolumeClaim and generic ephemeral volumes are resolved as the
// kubelet's desired-state-of-world populator does (createVolumeSpec): the
// claim bound and not being deleted (a generic ephemeral volume's claim
// owned by the pod), the PV bound back to it, volumeMode Filesystem for
// volumeMounts and Block for volumeDevices (CSI PVs only). A volume that cannot be resolved, or
// waits for its VolumeAttachment, makes Setup return a MountWaitError,
// worded as the kubelet's WaitForAttachAndMount error. Volumes no container
// uses are skipped, and a claim once set up is not resolved again for the
// pod. PV types: hostPath, local (node affinity checked against the Node's
// labels, then bind-mounted into
// <pod>/volumes/kubernetes.io~local-volume/<pv>) and csi.
//
// CSI volumes (from PVs, or inline with the driver's Ephemeral lifecycle
// mode) follow the kubelet's CSI attacher and mounter: the volume is
// counted in use (VolumesInUse, which the runtime publishes for the Node's
// status.volumesInUse), then, when the CSIDriver requires attach, wait for
// the VolumeAttachment (its metadata is the publish context) and for the
// Node to report the volume in use, NodeStageVolume once per volume on the node into
// <stateDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount
// when the driver has STAGE_UNSTAGE_VOLUME, NodePublishVolume into
// <pod>/volumes/kubernetes.io~csi/<name>/mount, then fsGroup by the
// driver's fsGroupPolicy. vol_data.json (the kubelet's keys) beside the
// target and the staging path is what teardown reads, so it needs no
// memory of the setup: a volume already published is left alone after a
// restart. The drivers are those registered in package csi.
//
// A Block claim follows the kubelet's CSI block mapper (csi_block.go):
// staged on <stateDir>/plugins/kubernetes.io/csi/volumeDevices/staging/<pv>,
// the device published on volumeDevices/publish/<pv>/<podUID>, and the
// link <pod>/volumeDevices/kubernetes.io~csi/<pv> to it is what the
// runtime gives containers as devices. A published volume is remembered
// (csi_republish.go): with the CSIDriver's requiresRepublish each later
// sync of the pod publishes it again, with the service account tokens of
// its tokenRequests; and a claim whose PV grew is expanded with
// NodeExpandVolume after publishing and on later syncs, its status then
// updated as the kubelet's NodeExpander does (csi_expand.go).
//
// Teardown, called once the pod's containers and sandbox are gone, first
// unpublishes the pod's CSI volumes through their drivers (and unstages
// those no other pod directory holds), then unmounts every tmpfs and bind
// mount under the pod's directory, checks /proc/self/mountinfo that none
// is left, and removes the directory.
//
// # Parts
//
// Manager is a façade (manager.go: New wires the parts, and its methods
// Setup, Teardown, Run, VolumesInUse, InUseChanged and VolumeStats hand
// over to them). The parts follow the kubelet's volume manager
// (pkg/kubelet/volumemanager) and volume plugins (pkg/volume); each owns
// its state and declares, in its own file, the small interface it needs
// of the others, with interface guards beside it:
//
//	part             files          kubelet counterpart               owns
//	reconciler       reconciler.go  reconciler, operation executor    Setup, Teardown, refresh loop
//	trackedPods      pods.go        desired state of world            pods, volume paths, dirty set
//	volumePlugins    plugins.go     VolumePluginMgr, in-tree plugins  one volume by its type
//	claimPlugin      pv.go          createVolumeSpec, local plugin    claims to PVs, local mounts
//	csiPlugin        csi*.go        pkg/volume/csi                    drivers, CSI calls, publications
//	nodeExpander     csi_expand.go  NodeExpander                      NodeExpandVolume, claim status
//	inUseTracker     inuse.go       GetVolumesInUse, ReportedInUse    volumes about to be used
//	statsCalculator  stats.go       volume stats calculator           volume stats
//
// The sources of volume contents are parts of their own too: objectSource
// (objects.go: the Watch, Cache and Get strategies), tokenManager
// (token.go), trustBundles (trustbundle.go) and podCertificates
// (podcert.go). To follow a pod: reconciler.setup → volumePlugins.setupVolume
// → claimPlugin.setupClaim → csiPlugin.setup; back out through
// reconciler.teardown → csiPlugin.teardown.
package volumes
