package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// reconciler brings a pod's volumes to what its spec asks, as the kubelet's
// volume manager reconciler and operation executor do for it: Setup on
// each sync of the pod (the volume plugins, plugins.go, set up each
// volume; a CSI volume set up before is resynced by the CSI plugin),
// Teardown once the pod is gone, and a loop that rewrites the mounted
// configMap, secret, downwardAPI and projected volumes of the pods it
// tracks (pods.go).
type reconciler struct {
	stateDir string
	syncFreq time.Duration
	clock    clock.WithTicker
	log      *slog.Logger
	events   eventRecorder
	pods     *trackedPods
	plugins  volumeSetter
	csi      csiPublications
	inUse    podForgetter
	// tokens say when a service account token is due for renewal; nil: no
	// tokens.
	tokens tokenRefresher
	// certs learn the pods with podCertificate sources; nil on a
	// standalone node.
	certs podCertTracker
	// unmounted are the pods unmount finished with (and no setup since):
	// their teardown, when they leave the node, only removes the pod's
	// directory instead of reading the node's mountinfo again. Empty
	// after a restart, when teardown checks everything.
	unmountedMu sync.Mutex
	unmounted   map[types.UID]bool
}

// markUnmounted records whether unmount finished with pod uid.
func (r *reconciler) markUnmounted(uid types.UID, done bool) {
	r.unmountedMu.Lock()
	defer r.unmountedMu.Unlock()
	if !done {
		delete(r.unmounted, uid)
		return
	}
	if r.unmounted == nil {
		r.unmounted = map[types.UID]bool{}
	}
	r.unmounted[uid] = true
}

func (r *reconciler) wasUnmounted(uid types.UID) bool {
	r.unmountedMu.Lock()
	defer r.unmountedMu.Unlock()
	return r.unmounted[uid]
}

// volumeSetter sets up one volume of a pod and returns its host path
// (plugins.go).
type volumeSetter interface {
	setupVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (string, error)
}

// csiPublications are the CSI plugin's published volumes (csi.go,
// csi_republish.go, csi_teardown.go), as the reconciler uses them.
type csiPublications interface {
	mountAt(path string) *csiMount
	resync(ctx context.Context, pod *corev1.Pod, name string, cm *csiMount, report func(key, reason string, err error))
	teardown(ctx context.Context, uid string) error
	forgetPod(uid string)
}

// tokenRefresher is when the token manager (token.go) next renews a token.
type tokenRefresher interface {
	nextRefresh() (time.Time, bool)
}

// podCertTracker is the pod certificate manager (podcert.go) learning a
// pod.
type podCertTracker interface {
	track(pod *corev1.Pod)
}

var (
	_ volumeSetter    = (*volumePlugins)(nil)
	_ csiPublications = (*csiPlugin)(nil)
	_ tokenRefresher  = (*tokenManager)(nil)
	_ podCertTracker  = (*podCertificates)(nil)
)

// setup is Manager.Setup.
func (r *reconciler) setup(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	r.markUnmounted(pod.UID, false)
	p := r.pods.track(pod)
	if r.certs != nil {
		r.certs.track(pod)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pod = pod
	paths := map[string]string{}
	var errs, processErrs []error
	var notProcessed, unattached []string
	mounts, devices := podVolumeUse(pod)
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Image != nil {
			// The runtime mounts an image volume itself (CRI Mount.image);
			// the kubelet's volume manager has no plugin for it either.
			continue
		}
		persistent := isPersistent(v)
		if persistent {
			if !mounts[v.Name] && !devices[v.Name] {
				// The kubelet's populator: "Skipping unused volume".
				continue
			}
			if path, ok := p.persistent[v.Name]; ok {
				paths[v.Name] = path
				p.mounted[v.Name] = path
				if cm := r.csi.mountAt(path); cm != nil {
					r.csi.resync(ctx, pod, v.Name, cm, func(key, reason string, err error) { r.reportOnce(pod, p, key, reason, err) })
				}
				continue
			}
		}
		_, wasMounted := p.mounted[v.Name]
		started := time.Now()
		path, err := r.plugins.setupVolume(ctx, pod, v)
		if !wasMounted {
			recordStorageOperation(pluginName(v), "volume_mount", started, err)
		}
		var pe *processError
		var ae *attachError
		switch {
		case errors.As(err, &pe):
			notProcessed = append(notProcessed, v.Name)
			processErrs = append(processErrs, err)
			continue
		case errors.As(err, &ae):
			unattached = append(unattached, v.Name)
			processErrs = append(processErrs, err)
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", v.Name, err))
			continue
		}
		paths[v.Name] = path
		p.mounted[v.Name] = path
		if persistent {
			p.persistent[v.Name] = path
		}
		if refreshable(v) {
			p.ready[v.Name] = true
		}
		delete(p.lastErr, v.Name)
	}
	if len(processErrs) > 0 {
		// The kubelet's WaitForAttachAndMount: volumes it could not
		// process or that wait for attachment hold the pod.
		var unmounted []string
		for name := range mounts {
			if _, ok := paths[name]; !ok {
				unmounted = append(unmounted, name)
			}
		}
		slices.Sort(unmounted)
		slices.Sort(notProcessed)
		slices.Sort(unattached)
		return paths, &MountWaitError{Unmounted: unmounted, Unattached: orEmpty(unattached),
			NotProcessed: orEmpty(notProcessed), Err: joinErrs(processErrs)}
	}
	return paths, errors.Join(errs...)
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// isPersistent: a volume backed by a PV or a CSI driver.
func isPersistent(v *corev1.Volume) bool {
	return v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil
}

// reportOnce logs and posts a CSI volume's resync error unless it was the
// last error under key.
func (r *reconciler) reportOnce(pod *corev1.Pod, p *podVolumes, key, reason string, err error) {
	switch {
	case err == nil:
		delete(p.lastErr, key)
	case p.lastErr[key] != err.Error():
		p.lastErr[key] = err.Error()
		r.log.Warn("Cannot resync CSI volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "reason", reason, "err", err)
		r.events.eventf(pod, corev1.EventTypeWarning, reason, "%s", err.Error())
	}
}

// podVolumeDirs are the directories under a pod's directory that its
// volumes live in: what unmount removes, where the kubelet's
// podVolumesExist looks.
var podVolumeDirs = []string{"volumes", subPathDirName, "volumeDevices"}

// unmount is Manager.Unmount.
func (r *reconciler) unmount(ctx context.Context, uid string) (err error) {
	defer func(start time.Time) { recordStorageOperation("", "volume_unmount", start, err) }(time.Now())
	if p := r.pods.untrack(types.UID(uid)); p != nil {
		// Wait for a refresh under way.
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	// CSI volumes go through their drivers first; the sweep below only
	// unmounts what nodelet mounted itself.
	if err := r.csi.teardown(ctx, uid); err != nil {
		return fmt.Errorf("tear down volumes of pod %s: %w", uid, err)
	}
	r.inUse.forgetPod(types.UID(uid))
	r.csi.forgetPod(uid)
	dir := PodDir(r.stateDir, uid)
	ms, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range ms {
		if err := unmount(mp.Path); err != nil {
			return err
		}
	}
	// Nothing may stay mounted: RemoveAll would go on into it. Asked of
	// each mount point (an openat2 each, see isMountPoint), not by reading
	// the node's mountinfo again: at 110 pods it has hundreds of lines,
	// and this is every pod's removal (issue 37's soak: two reads per
	// removed pod were a fifth of nodelet-runtime's CPU in the churn).
	for _, mp := range ms {
		if mounted, err := isMountPoint(mp.Path); err != nil || mounted {
			if err == nil {
				err = fmt.Errorf("%s is still mounted", mp.Path)
			}
			return fmt.Errorf("tear down volumes of pod %s: %w", uid, err)
		}
	}
	for _, d := range podVolumeDirs {
		if err := RemoveAll(filepath.Join(dir, d)); err != nil {
			return fmt.Errorf("remove %s: %w", filepath.Join(dir, d), err)
		}
	}
	r.markUnmounted(types.UID(uid), true)
	return nil
}

// teardown is Manager.Teardown.
func (r *reconciler) teardown(ctx context.Context, uid string) error {
	if !r.wasUnmounted(types.UID(uid)) {
		if err := r.unmount(ctx, uid); err != nil {
			return err
		}
	}
	dir := PodDir(r.stateDir, uid)
	if err := RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	r.markUnmounted(types.UID(uid), false)
	return nil
}

// run rewrites the refreshable volumes: of the dirty pods when woken, of
// all every syncFreq, and when a token is due, until ctx ends.
func (r *reconciler) run(ctx context.Context) {
	for {
		wait := r.syncFreq
		if r.tokens != nil {
			if at, ok := r.tokens.nextRefresh(); ok {
				// A token whose refresh failed stays due: retry, but not
				// in a tight loop.
				wait = min(wait, max(at.Sub(r.clock.Now()), 5*time.Second))
			}
		}
		t := r.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.pods.woken():
			t.Stop()
			r.refresh(ctx, r.pods.takeDirty())
		case <-t.C():
			r.refresh(ctx, r.pods.all())
		}
	}
}

// refresh rewrites the refreshable volumes of the pods.
func (r *reconciler) refresh(ctx context.Context, uids []types.UID) {
	for _, uid := range uids {
		p := r.pods.get(uid)
		if p == nil || ctx.Err() != nil {
			continue
		}
		r.refreshPod(ctx, p)
	}
}

func (r *reconciler) refreshPod(ctx context.Context, p *podVolumes) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod := p.pod
	if p.gone || pod == nil {
		return
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !p.ready[v.Name] {
			continue
		}
		_, err := r.plugins.setupVolume(ctx, pod, v)
		switch {
		case err == nil:
			delete(p.lastErr, v.Name)
		case p.lastErr[v.Name] != err.Error():
			p.lastErr[v.Name] = err.Error()
			r.log.Warn("Cannot refresh volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "volume", v.Name, "err", err)
		}
	}
}

// refreshable: the volume's contents come from the API or the pod and are
// rewritten while it runs.
func refreshable(v *corev1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}
