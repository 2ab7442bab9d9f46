// Package podtable is `nodelet pods`: the node's pods read from the bus and
// printed with kubectl get pods' columns.
package podtable

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// PodRow is one line of `nodelet pods`, with kubectl get pods' columns.
type PodRow struct {
	Namespace, Name, Ready, Status, Restarts, Age, IP string
}

// LoadPods reads the node's pods from the desired and status buckets (any
// connection may do, `nodelet pods` uses the read-only tap credential): the
// desired pods with their last written status. A pod without a creation
// time gets the time a source first delivered it.
func LoadPods(ctx context.Context, c *bus.Conn) ([]corev1.Pod, error) {
	var (
		mu      sync.Mutex
		desired = map[string]*schemas.PodDesired{}
		records = map[string]*schemas.PodStatusRecord{}
	)
	load := func(ctx context.Context, watch func(context.Context, func()) error) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := watch(ctx, cancel)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		return err
	}
	errs := make(chan error, 2)
	go func() {
		errs <- load(ctx, func(ctx context.Context, done func()) error {
			return bus.Watch(ctx, c, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
				mu.Lock()
				defer mu.Unlock()
				switch u.Kind {
				case bus.Put:
					desired[u.Key] = u.Value
				case bus.Deleted:
					delete(desired, u.Key)
				case bus.Synced:
					done()
				}
			})
		})
	}()
	go func() {
		errs <- load(ctx, func(ctx context.Context, done func()) error {
			return bus.Watch(ctx, c, bus.BucketStatus, ">", func(u bus.Update[schemas.PodStatusRecord]) {
				mu.Lock()
				defer mu.Unlock()
				switch u.Kind {
				case bus.Put:
					records[u.Key] = u.Value
				case bus.Deleted:
					delete(records, u.Key)
				case bus.Synced:
					done()
				}
			})
		})
	}()
	for range 2 {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading the pods from the bus: %w", err)
	}
	var pods []corev1.Pod
	for uid, d := range desired {
		// The mirror pods status creates in the API server are not the
		// node's own pods (the static pods they mirror are).
		if d.Pod == nil || podutil.IsMirrorPod(d.Pod) {
			continue
		}
		p := d.Pod.DeepCopy()
		if r := records[uid]; r != nil {
			p.Status = r.Status
		}
		if p.CreationTimestamp.IsZero() && !d.FirstSeen.IsZero() {
			p.CreationTimestamp = metav1.NewTime(d.FirstSeen)
		}
		pods = append(pods, *p)
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	return pods, nil
}

// PodRows turns pods into table rows the way kubectl's printPod does.
func PodRows(pods []corev1.Pod, now time.Time) []PodRow {
	rows := make([]PodRow, 0, len(pods))
	for i := range pods {
		rows = append(rows, podRow(&pods[i], now))
	}
	return rows
}

// WritePodTable prints rows as NAME READY STATUS RESTARTS AGE IP, with a
// NAMESPACE column first when withNamespace.
func WritePodTable(w io.Writer, rows []PodRow, withNamespace bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if withNamespace {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "NAME\tREADY\tSTATUS\tRESTARTS\tAGE\tIP")
	for _, r := range rows {
		if withNamespace {
			fmt.Fprintf(tw, "%s\t", r.Namespace)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Ready, r.Status, r.Restarts, r.Age, r.IP)
	}
	return tw.Flush()
}

func since(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// podRow is kubectl's printPod (pkg/printers/internalversion).
func podRow(pod *corev1.Pod, now time.Time) PodRow {
	restarts, sidecarRestarts := 0, 0
	total := len(pod.Spec.Containers)
	ready := 0
	var lastRestart, lastSidecarRestart metav1.Time
	reason := string(pod.Status.Phase)
	if reason == "" {
		reason = string(corev1.PodPending)
	}
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	inits := map[string]*corev1.Container{}
	for i := range pod.Spec.InitContainers {
		inits[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
		if podutil.IsRestartableInit(&pod.Spec.InitContainers[i]) {
			total++
		}
	}
	later := func(cur *metav1.Time, t *corev1.ContainerStateTerminated) {
		if t != nil && cur.Before(&t.FinishedAt) {
			*cur = t.FinishedAt
		}
	}
	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restarts += int(c.RestartCount)
		later(&lastRestart, c.LastTerminationState.Terminated)
		sidecar := podutil.IsRestartableInit(inits[c.Name])
		if sidecar {
			sidecarRestarts += int(c.RestartCount)
			later(&lastSidecarRestart, c.LastTerminationState.Terminated)
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case sidecar && c.Started != nil && *c.Started:
			if c.Ready {
				ready++
			}
			continue
		case c.State.Terminated != nil:
			switch t := c.State.Terminated; {
			case t.Reason != "":
				reason = "Init:" + t.Reason
			case t.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", t.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
			}
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != reasonPodInitializing:
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}
	initialized := false
	for _, c := range pod.Status.Conditions {
		initialized = initialized || (c.Type == corev1.PodInitialized && c.Status == corev1.ConditionTrue)
	}
	if !initializing || initialized {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		hasRunning := false
		errorReason := ""
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restarts += int(c.RestartCount)
			later(&lastRestart, c.LastTerminationState.Terminated)
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil:
				switch t := c.State.Terminated; {
				case t.Reason != "":
					reason = t.Reason
				case t.Signal != 0:
					reason = fmt.Sprintf("Signal:%d", t.Signal)
				default:
					reason = fmt.Sprintf("ExitCode:%d", t.ExitCode)
				}
				if c.State.Terminated.ExitCode != 0 {
					errorReason = reason
				}
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		if reason == "Completed" {
			podReady := false
			for _, c := range pod.Status.Conditions {
				podReady = podReady || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
			}
			switch {
			case hasRunning && podReady:
				reason = "Running"
			case errorReason != "":
				reason = errorReason
			case hasRunning:
				reason = "NotReady"
			}
		}
	}
	if pod.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if pod.DeletionTimestamp != nil && !isTerminal(pod.Status.Phase) {
		reason = "Terminating"
	}
	rs := fmt.Sprint(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		rs = fmt.Sprintf("%d (%s ago)", restarts, since(lastRestart, now))
	}
	ip := "<none>"
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	} else if pod.Status.PodIP != "" {
		ip = pod.Status.PodIP
	}
	return PodRow{
		Namespace: pod.Namespace, Name: pod.Name, Ready: fmt.Sprintf("%d/%d", ready, total),
		Status: reason, Restarts: rs, Age: since(pod.CreationTimestamp, now), IP: ip,
	}
}

// kubectl's printPod has its own copies of these pod rules; so does the table.
const reasonPodInitializing = "PodInitializing"

func isTerminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }
