package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	kubeletlabels "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// nodeView is what the read-only paths read from the bus beside the
// desired pods: each pod's status as nodelet-status computed it, the
// runtime's state as nodelet-runtime published it, and every daemon's last
// heartbeat.
type nodeView struct {
	mu      sync.Mutex
	status  map[string]*corev1.PodStatus // pod UID → status
	runtime *schemas.RuntimeState
	// volumes are the persistent volumes' stats nodelet-runtime measured
	// (CSI NodeGetVolumeStats, statfs of local volumes).
	volumes *schemas.PodVolumeStats
	beats   map[string]heartbeat
}

// volumeStats is the runtime's last volume stats record, nil without one.
func (v *nodeView) volumeStats() *schemas.PodVolumeStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.volumes
}

type heartbeat struct {
	hb schemas.Heartbeat
	at time.Time
}

func newNodeView() *nodeView {
	return &nodeView{status: map[string]*corev1.PodStatus{}, beats: map[string]heartbeat{}}
}

// watch mirrors the desired (into pods), status and runtime buckets and
// follows the heartbeats until ctx ends; the mirrors and subscriptions
// survive the bus's restarts.
func (v *nodeView) watch(ctx context.Context, wg *sync.WaitGroup, conn *bus.Conn, pods *podIndex, log *slog.Logger, clk clock.Clock) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		bus.RunAll(ctx,
			pods.mirror(conn),
			runtimeKey(conn, v, bus.KeyVolumeStats, func(x *schemas.PodVolumeStats) { v.volumes = x }),
			runtimeKey(conn, v, bus.KeyRuntimeState, func(x *schemas.RuntimeState) { v.runtime = x }),
			bus.NewMirror(conn, bus.BucketStatus, ">", func(u bus.Update[schemas.PodStatusRecord]) {
				v.mu.Lock()
				defer v.mu.Unlock()
				switch u.Kind {
				case bus.Put:
					v.status[u.Key] = &u.Value.Status
				case bus.Deleted:
					delete(v.status, u.Key)
				case bus.Reset:
					v.status = map[string]*corev1.PodStatus{}
				}
			}))
	}()
	sub, err := conn.NC.Subscribe(bus.SubjectHealthAll, func(m *nats.Msg) {
		// The subject says whose beat it is: only that component's
		// credential may publish on it. The body's name is the sender's
		// word, and another daemon could use it to report someone else.
		component := bus.HealthComponent(m.Subject)
		if component == "" {
			return
		}
		_, hb, err := schemas.Decode[schemas.Heartbeat](m.Data)
		if err != nil {
			log.Warn("Skipping heartbeat that does not decode", "subject", m.Subject, "err", err)
			return
		}
		if hb.Component != component {
			log.Warn("Heartbeat names another component than its subject's; filed under the subject's",
				"subject", m.Subject, "named", hb.Component)
			hb.Component = component
		}
		v.mu.Lock()
		v.beats[component] = heartbeat{hb: *hb, at: clk.Now()}
		v.mu.Unlock()
	})
	if err != nil {
		log.Error("Cannot watch heartbeats", "err", err)
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
}

// readOnlyAPI is the kubelet's read-only paths (pkg/kubelet/server/server.go
// InstallAuthNotRequiredHandlers: /healthz, /pods, /spec, /stats/summary)
// and /runningpods/ and /logs/, read from the node view, the desired pods,
// the stats provider and CRI.
type readOnlyAPI struct {
	log        *slog.Logger
	clock      clock.Clock
	started    time.Time     // nodelet-server's start: a daemon never heard from is stale after staleAfter
	staleAfter time.Duration // status.heartbeatStaleAfter
	daemons    []string      // those /healthz requires a fresh heartbeat from
	bus        *bus.Conn     // its Outages: nodelet-server's own lost watches
	view       *nodeView
	pods       *podIndex
	stats      summarizer
	machine    func() (*cadvisorapi.MachineInfo, error)
	rt         runningPodsRuntime
	systemLogs bool   // server.enableSystemLogHandler
	logDir     string // what /logs/ serves
}

// summarizer is the stats provider: /stats/summary.
type summarizer interface {
	Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error)
}

// runningPodsRuntime is the part of CRI /runningpods/ uses.
type runningPodsRuntime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

var (
	_ summarizer         = (*statsProvider)(nil)
	_ runningPodsRuntime = (internalapi.RuntimeService)(nil)
)

// healthCheck is one line of /healthz.
type healthCheck struct {
	name string
	err  error
}

// healthChecks says, for every daemon /healthz watches and for the
// container runtime, whether it is healthy and if not why: the kubelet's
// syncloop check (a loop that stopped turning is unhealthy) applied to each
// daemon's heartbeat. A daemon never heard from counts as stale once
// status.heartbeatStaleAfter has passed since nodelet-server started.
func (s *readOnlyAPI) healthChecks() []healthCheck {
	now := s.clock.Now()
	stale := s.staleAfter
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []healthCheck
	for _, d := range s.daemons {
		c := healthCheck{name: "nodelet-" + d}
		e, ok := v.beats[d]
		switch {
		case !ok && now.Sub(s.started) > stale:
			c.err = fmt.Errorf("no heartbeat received in %s", now.Sub(s.started).Round(time.Second))
		case !ok:
		case now.Sub(e.at) > stale:
			c.err = fmt.Errorf("last heartbeat %s ago (stale after %s)", now.Sub(e.at).Round(time.Second), stale)
		case !e.hb.Ready:
			c.err = fmt.Errorf("not ready: %s", e.hb.Message)
		}
		out = append(out, c)
	}
	// nodelet-server's own mirrors (it does not hear its own heartbeat):
	// a lost watch past its grace fails /healthz like a daemon's would.
	if s.bus != nil {
		if lost := s.bus.Outages(); len(lost) > 0 {
			out = append(out, healthCheck{name: "nodelet-server", err: errors.New(strings.Join(lost, "; "))})
		}
	}
	rc := healthCheck{name: "runtime"}
	switch rs := v.runtime; {
	case rs == nil && now.Sub(s.started) > stale:
		rc.err = fmt.Errorf("no runtime state published by nodelet-runtime")
	case rs == nil:
	case !rs.RuntimeReady:
		rc.err = fmt.Errorf("container runtime is down: %s", joinNonEmpty(": ", rs.Reason, rs.Message))
	}
	return append(out, rc)
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return "no reason given"
	}
	return strings.Join(out, sep)
}

// serveHealthz answers "ok", or 500 naming each failing check, in the
// format of k8s.io/apiserver's healthz (?verbose lists every check).
func (s *readOnlyAPI) serveHealthz(w http.ResponseWriter, r *http.Request) {
	failed := false
	var b strings.Builder
	b.WriteString("[+]ping ok\n")
	for _, c := range s.healthChecks() {
		if c.err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, c.err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch _, verbose := r.URL.Query()["verbose"]; {
	case failed:
		w.WriteHeader(http.StatusInternalServerError)
		b.WriteString("healthz check failed\n")
		_, _ = w.Write([]byte(b.String()))
	case verbose:
		b.WriteString("healthz check passed\n")
		_, _ = w.Write([]byte(b.String()))
	default:
		_, _ = w.Write([]byte("ok"))
	}
}

// podList is the kubelet's GetPods: the node's pods (desired, mirror pods
// left out) with their status as nodelet-status computed it, sorted by
// namespace and name.
func (s *readOnlyAPI) podList() *corev1.PodList {
	s.pods.mu.RLock()
	out := make([]corev1.Pod, 0, len(s.pods.byKey))
	for _, p := range s.pods.byKey {
		if !podutil.IsMirrorPod(p) {
			out = append(out, *p.DeepCopy())
		}
	}
	s.pods.mu.RUnlock()
	s.view.mu.Lock()
	for i := range out {
		if st := s.view.status[string(out[i].UID)]; st != nil {
			out[i].Status = *st.DeepCopy()
		} else if out[i].Status.Phase == "" {
			// No status yet (admission or the runtime has not seen the
			// pod): it is pending, as the API server would say.
			out[i].Status.Phase = corev1.PodPending
		}
	}
	s.view.mu.Unlock()
	sortPods(out)
	return &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: out}
}

func sortPods(out []corev1.Pod) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
}

func (s *readOnlyAPI) servePods(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.podList())
}

func (s *readOnlyAPI) serveSpec(w http.ResponseWriter, r *http.Request) {
	info, err := s.machine()
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, "machine info: "+err.Error())
		return
	}
	writeJSON(w, info)
}

// serveSummary is the kubelet's /stats/summary (pkg/kubelet/server/stats
// handler.go handleSummary): only_cpu_and_memory=true trims it to what
// metrics-server reads.
func (s *readOnlyAPI) serveSummary(w http.ResponseWriter, r *http.Request) {
	only := false
	for k, v := range r.URL.Query() {
		if k != "only_cpu_and_memory" {
			writeErrorString(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: /stats/summary takes only_cpu_and_memory=true|false", k))
			return
		}
		b, err := strconv.ParseBool(v[len(v)-1])
		if err != nil {
			writeErrorString(w, http.StatusBadRequest, fmt.Sprintf("only_cpu_and_memory=%q is not a boolean", v[len(v)-1]))
			return
		}
		only = b
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	sum, err := s.stats.Summary(ctx, only)
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, "stats summary: "+err.Error())
		return
	}
	writeJSON(w, sum)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// runningPods is the kubelet's GetRunningPods: the pods as the runtime sees
// them (its runtime cache's GetPods(false): ready sandboxes and running
// containers), each as kubecontainer.Pod.ToAPIPod makes it — UID, name,
// namespace and the containers' names and images, nothing else.
func (s *readOnlyAPI) runningPods(ctx context.Context) (*corev1.PodList, error) {
	sandboxes, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
		return s.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	})
	if err != nil {
		return nil, err
	}
	containers, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.Container, error) {
		return s.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	})
	if err != nil {
		return nil, err
	}
	byUID := map[string]*corev1.Pod{}
	pod := func(uid, ns, name string) *corev1.Pod {
		p := byUID[uid]
		if p == nil {
			p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: ns, Name: name}}
			byUID[uid] = p
		}
		return p
	}
	for _, sb := range sandboxes {
		md := sb.GetMetadata()
		pod(md.GetUid(), md.GetNamespace(), md.GetName())
	}
	for _, c := range containers {
		l := c.GetLabels()
		uid := l[kubeletlabels.KubernetesPodUIDLabel]
		if uid == "" {
			continue // not a Kubernetes container
		}
		p := pod(uid, l[kubeletlabels.KubernetesPodNamespaceLabel], l[kubeletlabels.KubernetesPodNameLabel])
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.GetMetadata().GetName(), Image: c.GetImage().GetImage()})
	}
	out := make([]corev1.Pod, 0, len(byUID))
	for _, p := range byUID {
		sort.Slice(p.Spec.Containers, func(i, j int) bool { return p.Spec.Containers[i].Name < p.Spec.Containers[j].Name })
		out = append(out, *p)
	}
	sortPods(out)
	return &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: out}, nil
}

func (s *readOnlyAPI) serveRunningPods(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	l, err := s.runningPods(ctx)
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, l)
}

// serveSystemLogs is the kubelet's /logs/ (Kubelet.ServeLogs without the
// NodeLogQuery gate): the files under /var/log, listed and read. With
// server.enableSystemLogHandler false it answers as the kubelet's disabled
// endpoint does.
func (s *readOnlyAPI) serveSystemLogs() http.Handler {
	if !s.systemLogs {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "logs endpoint is disabled.", http.StatusMethodNotAllowed)
		})
	}
	return http.StripPrefix(logsPath, http.FileServer(http.Dir(s.logDir)))
}

// runtimeKey keeps one key of the runtime bucket in the node view: set
// gets its value (nil once it is deleted or the store wiped), under the
// view's lock.
func runtimeKey[T any, PT interface {
	*T
	schemas.Message
}](conn *bus.Conn, v *nodeView, key string, set func(*T)) bus.Runner {
	return bus.NewMirror[T, PT](conn, bus.BucketRuntime, key, func(u bus.Update[T]) {
		v.mu.Lock()
		defer v.mu.Unlock()
		switch u.Kind {
		case bus.Put:
			set(u.Value)
		case bus.Deleted, bus.Reset:
			set(nil)
		}
	})
}
