package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// writeTimeout bounds one verdict write or delete; a failed one is retried.
const writeTimeout = 10 * time.Second

// retryPeriod is how often verdicts that could not be stored are retried.
const retryPeriod = time.Second

// podEntry is one desired pod.
type podEntry struct {
	desired *schemas.PodDesired
	rev     uint64
	static  bool
	// info is what the pod holds on the node if admitted, computed from
	// the current spec (an update of an admitted pod passes through).
	info *PodInfo
}

// controller owns admission's state. All of it is touched from the one
// goroutine of run; the bus watches hand their updates over as closures.
type controller struct {
	log      *slog.Logger
	conn     *bus.Conn
	health   func(ready bool, message string)
	clock    clock.PassiveClock
	writer   *bus.Writer
	admitter *Admitter
	disabled bool

	pods        map[string]*podEntry
	verdicts    map[string]*schemas.AdmissionVerdict
	observed    map[string]*schemas.PodObserved
	pressureRev uint64

	pending  map[string]struct{} // desired pods without a verdict
	dirty    map[string]struct{} // verdicts to store
	gone     map[string]struct{} // verdicts to delete
	announce map[string]struct{} // rejections whose event waits until the verdict is stored

	// devices and podDevices are nodelet-devices' resources and
	// allocations (key pods.<uid> → by pod UID).
	devices                         *schemas.DeviceResources
	podDevices                      map[string]*schemas.PodDevices
	devicesSynced, podDevicesSynced bool

	desiredSynced, observedSynced, pressureSynced bool
	desiredLoaded                                 bool // the first full load of the desired bucket happened
	ready                                         bool
	writeErr                                      error
	others                                        []*PodInfo
}

func newController(log *slog.Logger, conn *bus.Conn, health func(bool, string), clk clock.PassiveClock, node *corev1.Node, sysctls *SysctlHandler, disabled bool) *controller {
	return &controller{
		log: log, conn: conn, health: health, clock: clk, admitter: NewAdmitter(node, sysctls), disabled: disabled,
		pods: map[string]*podEntry{}, verdicts: map[string]*schemas.AdmissionVerdict{}, observed: map[string]*schemas.PodObserved{},
		podDevices: map[string]*schemas.PodDevices{},
		pending:    map[string]struct{}{}, dirty: map[string]struct{}{}, gone: map[string]struct{}{}, announce: map[string]struct{}{},
	}
}

// run serves until ctx is done.
func (c *controller) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ops := make(chan func(), 128)
	send := func(op func()) {
		select {
		case ops <- op:
		case <-ctx.Done():
		}
	}
	// The bucket recreated under us (the bus's store was wiped): every
	// verdict is a fact we hold, so write them all again.
	c.writer = bus.NewWriter(c.conn, bus.BucketAdmission, func() error { send(c.rewriteAll); return nil })

	c.health(false, "Loading admission verdicts")
	if err := c.loadVerdicts(ctx); err != nil {
		return nil // only ctx ends loadVerdicts
	}
	c.health(false, "Loading the desired, observed and pressure buckets")

	// The mirrors re-establish a lost watch and report the outage
	// (bus.Mirror); they return when ctx ends.
	mirrors := make(chan struct{})
	defer func() { <-mirrors }()
	defer cancel()
	go func() {
		defer close(mirrors)
		bus.RunAll(ctx,
			bus.NewMirror(c.conn, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) { send(func() { c.onDesired(u) }) }),
			bus.NewMirror(c.conn, bus.BucketObserved, ">", func(u bus.Update[schemas.PodObserved]) { send(func() { c.onObserved(u) }) }),
			bus.NewMirror(c.conn, bus.BucketPressure, bus.KeyPressure, func(u bus.Update[schemas.NodePressure]) { send(func() { c.onPressure(u) }) }),
			bus.NewMirror(c.conn, bus.BucketRuntime, bus.KeyRuntimeState, func(u bus.Update[schemas.RuntimeState]) { send(func() { c.onRuntime(u) }) }),
			bus.NewMirror(c.conn, bus.BucketDevices, bus.KeyDevices, func(u bus.Update[schemas.DeviceResources]) { send(func() { c.onDevices(u) }) }),
			bus.NewMirror(c.conn, bus.BucketDevices, devicesPodKeys, func(u bus.Update[schemas.PodDevices]) { send(func() { c.onPodDevices(u) }) }))
	}()

	retry := time.NewTicker(retryPeriod)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case op := <-ops:
			op()
			// Take everything already queued before deciding, so that a
			// burst of additions is decided as one batch in creation order,
			// as the kubelet's HandlePodAdditions sorts each batch.
			for more := true; more; {
				select {
				case op := <-ops:
					op()
				default:
					more = false
				}
			}
		case <-retry.C:
			if len(c.dirty) == 0 && len(c.gone) == 0 {
				continue
			}
		}
		c.step(ctx)
	}
}

// loadVerdicts reads the stored verdicts. They are facts: a pod admitted
// before a restart stays admitted, a rejected one stays rejected, whatever
// order the desired pods are replayed in.
func (c *controller) loadVerdicts(ctx context.Context) error {
	for {
		keys, err := c.writer.Keys(ctx)
		if err == nil {
			for _, k := range keys {
				data, _, ok, err := c.writer.Data(ctx, k)
				if err != nil || !ok {
					continue
				}
				var v schemas.AdmissionVerdict
				if err := json.Unmarshal(data, &v); err != nil || v.UID != k {
					if err == nil {
						err = fmt.Errorf("verdict names pod %q", v.UID)
					}
					c.log.Error("Ignoring stored verdict that does not decode; the pod will be decided again",
						"subject", bus.KVSubject(bus.BucketAdmission, k), "err", err)
					continue
				}
				c.verdicts[k] = &v
			}
			c.log.Info("Loaded admission verdicts", "count", len(c.verdicts))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Warn("Cannot read stored verdicts, retrying", "bucket", bus.BucketAdmission, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPeriod):
		}
	}
}

func validDesired(key string, d *schemas.PodDesired) error {
	switch {
	case d.Pod == nil:
		return errors.New("no pod in the message")
	case d.Pod.UID == "":
		return errors.New("pod has no UID")
	case string(d.Pod.UID) != key:
		return fmt.Errorf("pod UID %s does not match the key", d.Pod.UID)
	case d.Pod.Name == "" || d.Pod.Namespace == "":
		return errors.New("pod has no name or namespace")
	}
	return nil
}

func (c *controller) onDesired(u bus.Update[schemas.PodDesired]) {
	switch u.Kind {
	case bus.Put:
		if err := validDesired(u.Key, u.Value); err != nil {
			c.log.Error("Ignoring desired pod that is not valid", "subject", bus.KVSubject(bus.BucketDesired, u.Key),
				"revision", u.Revision, "err", err)
			return
		}
		e, ok := c.pods[u.Key]
		if !ok {
			e = &podEntry{}
			c.pods[u.Key] = e
		}
		e.desired, e.rev, e.static, e.info = u.Value, u.Revision, podutil.IsStaticDesired(u.Value), NewPodInfo(u.Value.Pod)
		e.info.Static = e.static
		if _, decided := c.verdicts[u.Key]; !decided {
			c.pending[u.Key] = struct{}{}
		}
	case bus.Deleted:
		e := c.pods[u.Key]
		delete(c.pods, u.Key)
		delete(c.pending, u.Key)
		if _, decided := c.verdicts[u.Key]; decided {
			c.forget(u.Key)
			if e != nil {
				c.log.Info("Pod removed, verdict deleted", "pod", podRef(e.desired.Pod), "podUID", u.Key)
			} else {
				c.log.Info("Pod removed, verdict deleted", "podUID", u.Key)
			}
		}
	case bus.Synced:
		c.desiredSynced = true
		if c.desiredLoaded {
			// Synced after a Reset: the bus's store was wiped and sources
			// may not have put their pods back yet. A verdict we hold must
			// not be lost (its pod would be decided again, perhaps the
			// other way), so it stays until its pod is deleted; one whose
			// pod never comes back goes at the next start.
			return
		}
		c.desiredLoaded = true
		// Verdicts of pods removed while admission was not running.
		for uid := range c.verdicts {
			if _, ok := c.pods[uid]; !ok {
				c.forget(uid)
				c.log.Info("Pod no longer desired, verdict deleted", "podUID", uid)
			}
		}
	case bus.Reset:
		c.desiredSynced = false
		c.pods = map[string]*podEntry{}
		c.pending = map[string]struct{}{}
	}
}

// forget drops uid's verdict and schedules its deletion: the pod's
// resources are free again.
func (c *controller) forget(uid string) {
	delete(c.verdicts, uid)
	delete(c.dirty, uid)
	delete(c.announce, uid)
	c.gone[uid] = struct{}{}
}

func (c *controller) onObserved(u bus.Update[schemas.PodObserved]) {
	switch u.Kind {
	case bus.Put:
		c.observed[u.Key] = u.Value
	case bus.Deleted:
		delete(c.observed, u.Key)
	case bus.Synced:
		c.observedSynced = true
	case bus.Reset:
		c.observedSynced = false
		c.observed = map[string]*schemas.PodObserved{}
	}
}

func (c *controller) onPressure(u bus.Update[schemas.NodePressure]) {
	switch u.Kind {
	case bus.Put:
		var conds []corev1.NodeConditionType
		for _, cond := range u.Value.Conditions {
			if cond.Status == corev1.ConditionTrue {
				conds = append(conds, cond.Type)
			}
		}
		c.admitter.Pressure.Conditions = conds
		c.admitter.Pressure.ShuttingDown = u.Value.ShuttingDown
		c.pressureRev = u.Revision
	case bus.Deleted:
		c.admitter.Pressure.Conditions = nil
		c.admitter.Pressure.ShuttingDown = false
		c.pressureRev = u.Revision
	case bus.Synced:
		c.pressureSynced = true
	case bus.Reset:
		c.pressureSynced = false
		c.admitter.Pressure.Conditions = nil
		c.admitter.Pressure.ShuttingDown = false
		c.pressureRev = 0
	}
}

// onRuntime keeps the container runtime's state, which decides the
// fields only some runtimes have (FieldsHandler).
func (c *controller) onRuntime(u bus.Update[schemas.RuntimeState]) {
	switch u.Kind {
	case bus.Put:
		c.admitter.Fields.SetRuntime(u.Value)
	case bus.Deleted, bus.Reset:
		c.admitter.Fields.SetRuntime(nil)
	}
}

// devicesPodKeys are the allocations' keys in the devices bucket.
const devicesPodKeys = "pods.>"

func (c *controller) onDevices(u bus.Update[schemas.DeviceResources]) {
	switch u.Kind {
	case bus.Put:
		c.devices = u.Value
	case bus.Deleted, bus.Reset:
		c.devices = nil
		c.devicesSynced = c.devicesSynced && u.Kind != bus.Reset
	case bus.Synced:
		c.devicesSynced = true
	}
	c.admitter.SetDevices(deviceAllocatable(c.devices))
}

func (c *controller) onPodDevices(u bus.Update[schemas.PodDevices]) {
	uid := strings.TrimPrefix(u.Key, "pods.")
	switch u.Kind {
	case bus.Put:
		c.podDevices[uid] = u.Value
	case bus.Deleted:
		delete(c.podDevices, uid)
	case bus.Synced:
		c.podDevicesSynced = true
	case bus.Reset:
		c.podDevicesSynced = false
		clear(c.podDevices)
	}
}

func (c *controller) rewriteAll() {
	for uid := range c.verdicts {
		c.dirty[uid] = struct{}{}
	}
}

// step decides the pending pods once every input is loaded, then stores
// what changed.
func (c *controller) step(ctx context.Context) {
	if c.desiredSynced && c.observedSynced && c.pressureSynced && c.devicesSynced && c.podDevicesSynced {
		c.decidePending()
		if !c.ready {
			c.ready = true
			c.log.Info("Admission synced", "pods", len(c.pods), "verdicts", len(c.verdicts))
		}
	}
	err := c.flush(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil && c.writeErr == nil:
		c.log.Warn("Cannot store admission verdicts, will retry", "bucket", bus.BucketAdmission, "err", err)
	case err == nil && c.writeErr != nil:
		c.log.Info("Admission verdicts stored again", "bucket", bus.BucketAdmission)
	}
	c.writeErr = err
	switch {
	case c.writeErr != nil:
		c.health(false, "Cannot store admission verdicts: "+c.writeErr.Error())
	case c.ready:
		c.health(true, "")
	}
}

// decidePending decides every pod without a verdict, oldest first
// (creation time, then UID), each against the pods admitted before it.
func (c *controller) decidePending() {
	if len(c.pending) == 0 {
		return
	}
	uids := make([]string, 0, len(c.pending))
	for uid := range c.pending {
		if _, ok := c.pods[uid]; ok {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool {
		a, b := c.pods[uids[i]].desired.Pod, c.pods[uids[j]].desired.Pod
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return uids[i] < uids[j]
	})
	held := map[string]struct{}{}
	for _, uid := range uids {
		e := c.pods[uid]
		if c.admitter.Fields.waitsForRuntime(&Attributes{Pod: e.desired.Pod}) {
			// Decided once nodelet-runtime says what its runtime has.
			c.log.Debug("Pod waits for the container runtime's features to be known", "pod", podRef(e.desired.Pod), "podUID", uid)
			held[uid] = struct{}{}
			continue
		}
		// The kubelet allocates devices in an admit handler; here
		// nodelet-devices does, and the pod waits for its allocation.
		if c.podDevices[uid] == nil && !c.disabled && waitsForDevices(e.desired.Pod, c.devices) {
			held[uid] = struct{}{}
			c.log.Debug("Waiting for the pod's devices", "pod", podRef(e.desired.Pod), "podUID", uid)
			continue
		}
		v, victims := c.decide(uid, e)
		c.verdicts[uid] = v
		c.dirty[uid] = struct{}{}
		if v.Admitted {
			c.log.Debug("Admitted pod", "pod", podRef(e.desired.Pod), "podUID", uid)
			for _, victim := range victims {
				c.preempt(victim, e.desired.Pod)
			}
			continue
		}
		c.announce[uid] = struct{}{}
		c.log.Info("Rejected pod", "pod", podRef(e.desired.Pod), "podUID", uid, "reason", v.Reason, "message", v.Message)
	}
	clear(c.pending)
	maps.Copy(c.pending, held)
}

// preempt turns an admitted pod's verdict into a preemption, so that a
// critical pod fits: the kubelet's evictPodsToFreeRequests. The victim's
// verdict is stored before the critical pod's (flush), and its event posted.
func (c *controller) preempt(victim *PodInfo, by *corev1.Pod) {
	uid := string(victim.Pod.UID)
	old := c.verdicts[uid]
	if old == nil {
		return
	}
	v := *old
	v.Admitted, v.Preempted = false, true
	v.Reason, v.Message = schemas.ReasonPreempting, schemas.MessagePreempted
	v.DecidedAt = c.clock.Now().UTC()
	c.verdicts[uid] = &v
	c.dirty[uid] = struct{}{}
	c.announce[uid] = struct{}{}
	c.log.Info("Preempting pod to free up resources", "pod", podRef(victim.Pod), "podUID", uid, "requestingPod", podRef(by))
}

func (c *controller) decide(uid string, e *podEntry) (*schemas.AdmissionVerdict, []*PodInfo) {
	pod := e.desired.Pod
	res := Result{Admit: true}
	switch {
	case c.disabled:
		// admission.disabled: debugging only.
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		// The kubelet does not admit a pod that already ended: it only
		// makes sure nothing of it runs.
	default:
		res = c.admitter.Admit(&Attributes{Pod: pod, Static: e.static, OtherPods: c.holding(),
			Devices: c.podDevices[uid], DevicesAllocated: deviceAllocated(c.podDevices)})
	}
	return &schemas.AdmissionVerdict{
		UID: uid, Namespace: pod.Namespace, Name: pod.Name,
		Admitted: res.Admit, Reason: res.Reason, Message: res.Message,
		DesiredRevision: e.rev, PressureRevision: c.pressureRev,
		DecidedAt: c.clock.Now().UTC(),
	}, res.Preempt
}

// holding lists the admitted pods that still hold resources.
func (c *controller) holding() []*PodInfo {
	c.others = c.others[:0]
	for uid, e := range c.pods {
		if v := c.verdicts[uid]; v == nil || !v.Admitted {
			continue
		}
		if podutil.Inactive(e.desired.Pod, c.observed[uid]) {
			continue
		}
		c.others = append(c.others, e.info)
	}
	return c.others
}

// flush stores and deletes what changed. On the first failure it stops
// (the bus is likely away) and the retry tick tries again.
func (c *controller) flush(ctx context.Context) error {
	for _, uid := range sortedKeys(c.gone) {
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		_, err := c.writer.Delete(wctx, uid)
		cancel()
		if err != nil {
			return err
		}
		delete(c.gone, uid)
	}
	// Preemptions first, stored before any other verdict is sent: the
	// runtime must see a victim go before the pod it makes room for. Each
	// group goes in one round trip (bus.Writer.PutMany).
	var preempted, others []string
	for _, uid := range sortedKeys(c.dirty) {
		switch v := c.verdicts[uid]; {
		case v == nil:
			delete(c.dirty, uid)
		case v.Preempted:
			preempted = append(preempted, uid)
		default:
			others = append(others, uid)
		}
	}
	for _, group := range [][]string{preempted, others} {
		if err := c.putVerdicts(ctx, group); err != nil {
			return err
		}
	}
	return nil
}

// putVerdicts stores the verdicts of uids and announces the rejections
// among them; it returns the first failure (what failed stays dirty).
func (c *controller) putVerdicts(ctx context.Context, uids []string) error {
	if len(uids) == 0 {
		return nil
	}
	entries := make([]bus.Entry, len(uids))
	for i, uid := range uids {
		entries[i] = bus.Entry{Key: uid, Msg: c.verdicts[uid]}
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var failed error
	for i, r := range c.writer.PutMany(wctx, entries) {
		uid, v := uids[i], c.verdicts[uids[i]]
		if r.Err != nil {
			if failed == nil {
				failed = r.Err
			}
			continue
		}
		delete(c.dirty, uid)
		if _, ok := c.announce[uid]; ok {
			delete(c.announce, uid)
			c.conn.Emit(schemas.Event{
				Object: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: v.Namespace, Name: v.Name, UID: types.UID(uid)},
				Type:   corev1.EventTypeWarning, Reason: v.Reason, Message: v.Message, Time: v.DecidedAt,
			})
		}
	}
	return failed
}

func sortedKeys(m map[string]struct{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var podRef = podutil.PodRef
