package status

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// apiSync is the status manager's API half: it patches each pod's status
// (the mirror pod's for a static pod) when the API's differs from the
// bucket's, keeps mirror pods, and deletes pods whose graceful deletion the
// runtime has finished.
//
// Work is keyed by namespace/name in a rate-limited work queue: any number
// of changes to one pod while it waits become one patch computed from the
// latest status, and failures retry with back-off. The node's API
// client is rate limited by sources.kubeAPIQPS/kubeAPIBurst. The pods of
// this node come from an informer (field selector spec.nodeName).
type apiSync struct {
	s      *Daemon
	kube   kubernetes.Interface
	lister corelisters.PodLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// latest holds patch responses, which may be newer than the informer.
	latest map[types.UID]*corev1.Pod
}

func newAPISync(s *Daemon, kube kubernetes.Interface) *apiSync {
	return &apiSync{
		s:    s,
		kube: kube,
		// Retries back off from 100ms to 10s: the kubelet retries a failed
		// status sync within its 10s batch period, not after minutes.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodelet_status_pods"}),
		latest: map[types.UID]*corev1.Pod{},
	}
}

func (a *apiSync) enqueueObj(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		a.queue.Add(key)
	}
}

// onDelete forgets the last patch response of a pod gone from the API and
// queues its key. Pods leave without nodelet's deletePod too: a terminal
// pod's deletion is immediate (a Job's pods collected after it finished),
// and a force delete; their responses stayed, one pod object per such pod.
func (a *apiSync) onDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		a.forget(p.UID)
	}
	a.enqueueObj(obj)
}

func (a *apiSync) run(ctx context.Context) {
	defer a.queue.ShutDown()
	factory := informers.NewSharedInformerFactoryWithOptions(a.kube, 30*time.Second,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.s.nodeName).String()
		}))
	inf := factory.Core().V1().Pods()
	a.lister = inf.Lister()
	a.synced = inf.Informer().HasSynced
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueueObj,
		UpdateFunc: func(_, n any) { a.enqueueObj(n) },
		DeleteFunc: a.onDelete,
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return
	}
	a.s.log.Info("Pod informer synced", "node", a.s.nodeName)
	// Everything recorded before the informer synced.
	for _, key := range a.s.podKeys() {
		a.queue.Add(key)
	}
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for {
		key, quit := a.queue.Get()
		if quit {
			factory.Shutdown()
			return
		}
		err := a.sync(ctx, key)
		switch {
		case err == nil:
			a.queue.Forget(key)
		case ctx.Err() == nil:
			a.s.log.Warn("Failed to sync pod with the API server, will retry", "pod", key, "err", err)
			a.queue.AddRateLimited(key)
		}
		a.queue.Done(key)
	}
}

// podKeys lists namespace/name of every desired pod and record.
func (s *Daemon) podKeys() []string {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	var out []string
	for _, d := range s.st.desired {
		if d.Pod != nil {
			out = append(out, d.Pod.Namespace+"/"+d.Pod.Name)
		}
	}
	for _, r := range s.st.records {
		out = append(out, r.Namespace+"/"+r.Name)
	}
	return out
}

// podInfo is what nodelet knows about one desired pod.
type podInfo struct {
	d   *schemas.PodDesired
	rec *schemas.PodStatusRecord
	obs *schemas.PodObserved
	v   *schemas.AdmissionVerdict
}

// podsByName finds the desired pods called namespace/name (two while a pod
// is replaced by another of the same name) and whether every input bucket
// has been loaded. The caller must not hold s.st.mu.
func (s *Daemon) podsByName(ns, name string) ([]podInfo, bool) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	var out []podInfo
	for uid, x := range s.st.desired {
		if x.Pod != nil && x.Pod.Namespace == ns && x.Pod.Name == name && !podutil.IsMirrorPod(x.Pod) {
			out = append(out, podInfo{x, s.st.records[uid], s.st.observed[uid], s.st.verdicts[uid]})
		}
	}
	return out, s.st.allSynced()
}

// sync brings one pod's API object in line with what nodelet knows.
func (a *apiSync) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	infos, synced := a.s.podsByName(ns, name)
	if !synced {
		// Statuses are not computed yet; everything is queued again then.
		a.queue.AddAfter(key, time.Second)
		return nil
	}
	apiPod, err := a.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		apiPod = nil
		// A patch answered after the informer saw the delete (onDelete).
		for _, i := range infos {
			a.forget(i.d.Pod.UID)
		}
	} else if err != nil {
		return err
	}
	var info podInfo
	for _, i := range infos {
		// The one the API object is, else a static pod, else any.
		if info.d == nil || (apiPod != nil && i.d.Pod.UID == apiPod.UID) || (podutil.IsStaticDesired(i.d) && !podutil.IsStaticDesired(info.d)) {
			info = i
		}
	}
	d, rec, obs, verdict := info.d, info.rec, info.obs, info.v
	if d == nil {
		if apiPod != nil && podutil.IsMirrorPod(apiPod) {
			// A mirror pod whose static pod is gone.
			return a.deleteMirror(ctx, apiPod, "static pod removed")
		}
		return nil
	}
	if podutil.IsStaticDesired(d) {
		return a.syncStatic(ctx, d, rec, apiPod)
	}
	if apiPod == nil || apiPod.UID != d.Pod.UID {
		return nil
	}
	if rec != nil {
		if apiPod, err = a.patchStatus(ctx, apiPod, rec.Status); err != nil {
			return err
		}
	}
	if canBeDeleted(apiPod, obs, verdict) {
		return a.deletePod(ctx, apiPod)
	}
	return nil
}

// canBeDeleted is the status manager's canBeDeleted: the pod is being
// deleted, the API shows it terminal, and the runtime finished with it
// (podIsFinished: stopped, its volumes unmounted, its cgroup removed), or
// it never ran (admission rejected it).
func canBeDeleted(pod *corev1.Pod, obs *schemas.PodObserved, v *schemas.AdmissionVerdict) bool {
	if pod.DeletionTimestamp == nil || podutil.IsMirrorPod(pod) || !podutil.IsTerminalPhase(pod.Status.Phase) {
		return false
	}
	if obs != nil {
		return obs.Finished
	}
	return v != nil && !v.Admitted
}

// deletePod finishes graceful deletion: grace period 0, and only the pod
// with this UID, never one recreated under the same name.
func (a *apiSync) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := a.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod: %w", err)
	}
	a.s.log.Info("Pod fully terminated and removed from the API server", "pod", podutil.PodRef(pod), "podUID", pod.UID)
	a.forget(pod.UID)
	return nil
}

// base returns the newest known copy of pod: the informer's or the last
// patch response.
func (a *apiSync) base(pod *corev1.Pod) *corev1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.latest[pod.UID]
	if l == nil {
		return pod
	}
	lrv, err1 := strconv.ParseUint(l.ResourceVersion, 10, 64)
	prv, err2 := strconv.ParseUint(pod.ResourceVersion, 10, 64)
	if err1 == nil && err2 == nil && lrv > prv {
		return l
	}
	delete(a.latest, pod.UID)
	return pod
}

func (a *apiSync) forget(uid types.UID) {
	a.mu.Lock()
	delete(a.latest, uid)
	a.mu.Unlock()
}

// patchStatus patches pod's status to status when they differ, as the
// kubelet's PatchPodStatus: a strategic merge patch between the API's
// status and ours, with the pod's UID as precondition (a pod recreated
// under the same name is never patched). It returns the newest pod.
func (a *apiSync) patchStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) (*corev1.Pod, error) {
	pod = a.base(pod)
	merged := mergePodStatus(pod.Status, status)
	patch, unchanged, err := podStatusPatch(pod.UID, pod.Status, merged)
	if err != nil || unchanged {
		return pod, err
	}
	start := time.Now()
	updated, err := a.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or recreated with another UID: nothing to patch.
			return pod, nil
		}
		return pod, fmt.Errorf("patch status: %w", err)
	}
	a.s.metrics.statusSyncDuration.Observe(time.Since(start).Seconds())
	a.s.kubelet.statusSync.Observe(time.Since(start).Seconds())
	a.s.log.Debug("Patched pod status", "pod", podutil.PodRef(pod), "podUID", pod.UID, "phase", merged.Phase)
	a.mu.Lock()
	a.latest[updated.UID] = updated
	a.mu.Unlock()
	return updated, nil
}

// podStatusPatch is the kubelet's preparePatchBytesForPodStatus.
func podStatusPatch(uid types.UID, oldStatus, newStatus corev1.PodStatus) ([]byte, bool, error) {
	oldData, err := json.Marshal(corev1.Pod{Status: oldStatus})
	if err != nil {
		return nil, false, err
	}
	newData, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: newStatus})
	if err != nil {
		return nil, false, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, corev1.Pod{})
	if err != nil {
		return nil, false, fmt.Errorf("create status patch: %w", err)
	}
	return patch, string(patch) == fmt.Sprintf(`{"metadata":{"uid":%q}}`, uid), nil
}

// mergePodStatus is the status manager's: conditions the node agent does
// not own stay as the API has them, as do resource claim statuses; a
// terminal phase never comes with a ready pod.
func mergePodStatus(apiStatus, ours corev1.PodStatus) corev1.PodStatus {
	out := *ours.DeepCopy()
	var conds []corev1.PodCondition
	for _, c := range apiStatus.Conditions {
		if !conditionByKubelet(c.Type) && c.Type != corev1.DisruptionTarget {
			conds = append(conds, c)
		}
	}
	for _, c := range ours.Conditions {
		// DisruptionTarget goes out with the terminal phase, not before
		// (the kubelet's guard against an early, unneeded patch).
		if conditionByKubelet(c.Type) || (c.Type == corev1.DisruptionTarget && podutil.IsTerminalPhase(ours.Phase)) {
			conds = append(conds, c)
		}
	}
	if dt := findCondition(apiStatus.Conditions, corev1.DisruptionTarget); dt != nil && findCondition(conds, corev1.DisruptionTarget) == nil {
		conds = append(conds, *dt)
	}
	out.Conditions = conds
	out.ResourceClaimStatuses = apiStatus.ResourceClaimStatuses
	out.ExtendedResourceClaimStatus = apiStatus.ExtendedResourceClaimStatus
	if podutil.IsTerminalPhase(apiStatus.Phase) && out.Phase != apiStatus.Phase {
		out.Phase, out.Reason, out.Message = apiStatus.Phase, apiStatus.Reason, apiStatus.Message
	}
	if podutil.IsTerminalPhase(out.Phase) {
		for i := range out.Conditions {
			t := out.Conditions[i].Type
			if (t == corev1.PodReady || t == corev1.ContainersReady) && out.Conditions[i].Status == corev1.ConditionTrue {
				ltt := out.Conditions[i].LastTransitionTime
				out.Conditions[i] = terminalReadyCondition(t, out.Phase)
				out.Conditions[i].LastTransitionTime = ltt
			}
		}
	}
	return out
}
