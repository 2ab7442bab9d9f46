package devices

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// wipingDelay is the kubelet's defaultWipingDelay: how long a DRA driver
// may have no usable connection before the node's ResourceSlices of it go.
const wipingDelay = 30 * time.Second

// sliceWiper is the ResourceSlice half of the kubelet's DRAPluginManager
// (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go sync and
// wipeResourceSlices): when no plugin of a driver has been connected for
// wipingDelay, the node's ResourceSlices of that driver are deleted, so the
// scheduler stops placing pods here for devices nobody would prepare. The
// driver publishes them again when it comes back.
//
// At start the kubelet wipes every slice of the node at once, as no driver
// has registered yet. nodelet-devices restarts on its own far more often
// than a kubelet does, and its drivers register again within a second, so
// it gives them the same wipingDelay: after it, the slices of every driver
// not connected by then go (deviation noted in docs/devices.md).
type sliceWiper struct {
	log    *slog.Logger
	node   string
	client func() kubernetes.Interface
	clock  clock.WithDelayedExecution
	delay  time.Duration
	// usable lists the drivers with a connected plugin now.
	usable func() []string

	mu      sync.Mutex
	ctx     context.Context
	pending map[string]clock.Timer // driver ("" for the start's) → its wipe
}

func newSliceWiper(ctx context.Context, log *slog.Logger, node string, client func() kubernetes.Interface, usable func() []string) *sliceWiper {
	return &sliceWiper{log: log, node: node, client: client, clock: clock.RealClock{}, delay: wipingDelay,
		usable: usable, ctx: ctx, pending: map[string]clock.Timer{}}
}

// start schedules the start's wipe of the drivers that do not come back.
func (w *sliceWiper) start() { w.schedule("") }

// schedule wipes driver's slices after the delay unless cancel comes
// first; a wipe already scheduled keeps its time (the kubelet's sync).
func (w *sliceWiper) schedule(driver string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil || w.pending[driver] != nil {
		return
	}
	w.pending[driver] = w.clock.AfterFunc(w.delay, func() {
		w.mu.Lock()
		delete(w.pending, driver)
		w.mu.Unlock()
		w.wipe(w.ctx, driver)
	})
}

// cancel drops driver's pending wipe: a plugin of it is connected again.
func (w *sliceWiper) cancel(driver string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.pending[driver]; t != nil {
		t.Stop()
		delete(w.pending, driver)
	}
}

// stop drops every pending wipe.
func (w *sliceWiper) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for d, t := range w.pending {
		t.Stop()
		delete(w.pending, d)
	}
}

// selector picks the node's slices of driver; for "" (the start's wipe),
// of every driver not usable now.
func (w *sliceWiper) selector(driver string) (string, bool) {
	if driver != "" {
		for _, u := range w.usable() {
			if u == driver {
				return "", false // it came back as the timer fired
			}
		}
		return fields.Set{resourceapi.ResourceSliceSelectorNodeName: w.node, resourceapi.ResourceSliceSelectorDriver: driver}.AsSelector().String(), true
	}
	sel := []fields.Selector{fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, w.node)}
	usable := w.usable()
	sort.Strings(usable)
	for _, u := range usable {
		sel = append(sel, fields.OneTermNotEqualSelector(resourceapi.ResourceSliceSelectorDriver, u))
	}
	return fields.AndSelectors(sel...).String(), true
}

// wipe is the kubelet's wipeResourceSlices: DeleteCollection, retried
// with its back-off until it is done or ctx ends.
func (w *sliceWiper) wipe(ctx context.Context, driver string) {
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: 5 * time.Minute, Steps: 100}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		c := w.client()
		if c == nil {
			return false, nil // no API client yet
		}
		sel, ok := w.selector(driver)
		if !ok {
			return true, nil
		}
		err := c.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel})
		switch {
		case err == nil:
			w.log.Info("Deleted ResourceSlices", "fieldSelector", sel)
			return true, nil
		case apierrors.IsNotFound(err):
			return true, nil
		case apierrors.IsUnauthorized(err):
			return false, nil // credentials still coming
		default:
			w.log.Error("Deleting ResourceSlices failed, will retry", "fieldSelector", sel, "err", err)
			return false, nil
		}
	})
}
