package status

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// helperEnv, when set, makes the test binary run nodelet-status (see
// TestMain) with the JSON helperConfig it holds: the SIGKILL test's child.
const helperEnv = "NODELET_STATUS_TEST_HELPER"

type helperConfig struct {
	BusURL, StateDir, Kubeconfig, NodeName, Address string
	// CrashAfterPost lists events ("patch" for any count update, or a
	// reason) after whose posting, before its acknowledgement, the process
	// SIGKILLs itself, once each (a marker file in MarkerDir says done).
	CrashAfterPost []string
	MarkerDir      string
}

// crashAfterPost is the hook of helperConfig.CrashAfterPost.
func crashAfterPost(hc helperConfig) func(*corev1.Event) {
	return func(ev *corev1.Event) {
		for _, what := range hc.CrashAfterPost {
			if what != ev.Reason && (what != "patch" || ev.Count < 2) {
				continue
			}
			marker := filepath.Join(hc.MarkerDir, "crashed-"+what)
			if _, err := os.Stat(marker); err == nil {
				continue
			}
			_ = os.WriteFile(marker, []byte(ev.Name), 0o644)
			fmt.Fprintf(os.Stderr, "test: SIGKILL after posting %s (count %d), before acknowledging it\n", ev.Reason, ev.Count)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

// runStatusHelper is nodelet-status as the daemon runs it: bus connection
// with the status credential, the API clients built from a kubeconfig,
// until SIGTERM (or SIGKILL).
func runStatusHelper() int {
	var hc helperConfig
	if err := json.Unmarshal([]byte(os.Getenv(helperEnv)), &hc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	testHookAfterPost = crashAfterPost(hc)
	cfg := config.Defaults()
	cfg.Node.Name, cfg.Node.Address, cfg.Node.StateDir = hc.NodeName, hc.Address, hc.StateDir
	cfg.Node.Kubeconfig = hc.Kubeconfig
	cfg.Status.NodeStatusUpdateFrequency = time.Second
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("pid", os.Getpid())
	conn, err := bus.Connect(bus.ConnectOptions{URL: hc.BusURL, Component: bus.Status, StateDir: hc.StateDir, Log: log})
	if err != nil {
		log.Error("Cannot connect", "err", err)
		return 1
	}
	kube, events, err := KubeClients(context.Background(), cfg, slog.Default())
	if err != nil {
		log.Error("Cannot build clients", "err", err)
		return 1
	}
	s, err := New(Options{Deps: daemon.Deps{Config: cfg, Log: log, Bus: conn}, Kube: kube, EventsKube: events})
	if err != nil {
		log.Error("Cannot start", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = s.Run(ctx)
	conn.Close()
	if err != nil {
		return 1
	}
	return 0
}

// supervisor keeps one nodelet-status process running, as `nodelet up`
// would: a process that dies is started again.
type supervisor struct {
	t       *testing.T
	newCmd  func() *exec.Cmd
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	starts  int
	stopped bool
	done    chan struct{}
}

func supervise(t *testing.T, newCmd func() *exec.Cmd, logPath string) *supervisor {
	sv := &supervisor{t: t, newCmd: newCmd, logPath: logPath, done: make(chan struct{})}
	go sv.loop()
	t.Cleanup(sv.stop)
	return sv
}

func (sv *supervisor) loop() {
	defer close(sv.done)
	for {
		sv.mu.Lock()
		if sv.stopped {
			sv.mu.Unlock()
			return
		}
		logf, err := os.OpenFile(sv.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			sv.mu.Unlock()
			sv.t.Error(err)
			return
		}
		cmd := sv.newCmd()
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		logf.Close()
		if err != nil {
			sv.mu.Unlock()
			sv.t.Error(err)
			return
		}
		sv.cmd = cmd
		sv.starts++
		sv.mu.Unlock()
		_ = cmd.Wait()
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs the running process; the supervisor starts another.
func (sv *supervisor) kill() {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.cmd != nil && sv.cmd.ProcessState == nil {
		_ = sv.cmd.Process.Signal(syscall.SIGKILL)
	}
}

func (sv *supervisor) startCount() int {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.starts
}

func (sv *supervisor) stop() {
	sv.mu.Lock()
	sv.stopped = true
	if sv.cmd != nil && sv.cmd.ProcessState == nil {
		_ = sv.cmd.Process.Signal(syscall.SIGTERM)
	}
	sv.mu.Unlock()
	<-sv.done
}

// TestSIGKILLDuringChurn kills nodelet-status (a real process, SIGKILL)
// three times while pods change and events flow, and twice more exactly
// between posting an event and acknowledging it (once a create, once a
// count patch), and checks that no pod status ever went backwards (in the
// bucket or in the API), that every pod converges, and that every event is
// in the API exactly once.
func TestSIGKILLDuringChurn(t *testing.T) {
	h := newHarness(t)
	hc := helperConfig{BusURL: h.b.URL, StateDir: h.b.StateDir, Kubeconfig: cp.NodeKubeconfig, NodeName: "node-1", Address: "10.11.12.13",
		CrashAfterPost: []string{"Churn5", "patch"}, MarkerDir: t.TempDir()}
	b, _ := json.Marshal(hc)
	churn(t, h, func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
		return cmd
	}, func() {
		for _, m := range hc.CrashAfterPost {
			if _, err := os.Stat(filepath.Join(hc.MarkerDir, "crashed-"+m)); err != nil {
				t.Errorf("the crash after posting %q did not happen", m)
			}
		}
	})
}

// TestDaemonBinarySIGKILL is the same churn with the built nodelet-status
// binary itself, configured by flags, with a real containerd behind it.
func TestDaemonBinarySIGKILL(t *testing.T) {
	testenv.RequiresRoot(t)
	bin := testenv.MustDaemonBinary(t, "status")
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{NoImages: true})
	h := newHarness(t)
	logs := t.TempDir()
	churn(t, h, func() *exec.Cmd {
		return exec.Command(bin, "--log-level=debug",
			"--node.name=node-1", "--node.address=10.11.12.13", "--node.stateDir="+h.b.StateDir, "--node.podLogsDir="+logs,
			"--bus.listen="+h.b.Server.Addr(), "--runtime.endpoint="+ctrd.Endpoint,
			"--node.kubeconfig="+cp.NodeKubeconfig,
			"--status.nodeStatusUpdateFrequency=1s")
	}, nil)
}

// churn drives four pods through twelve rounds of changes with events,
// under a supervisor running nodelet-status made by newCmd, SIGKILLing it
// every third round, then checks convergence, exactly-once events and
// that no status ever went backwards. extra runs more checks at the end.
func churn(t *testing.T, h *harness, newCmd func() *exec.Cmd, extra func()) {
	h.runtimeReady()
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	began := time.Now().Add(-time.Second).Truncate(time.Second)
	// Starting events of earlier tests (other buses) are not ours.
	startingSelector := fields.Set{"involvedObject.name": "node-1", "reason": EventStarting}.String()
	earlier := map[string]bool{}
	if evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctxT(t), metav1.ListOptions{FieldSelector: startingSelector}); err == nil {
		for _, e := range evs.Items {
			earlier[e.Name] = true
		}
	} else {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Every status the bucket and the API ever hold, in order.
	var mu sync.Mutex
	bucketHistory := map[string][]corev1.PodStatus{}
	apiHistory := map[string][]corev1.PodStatus{}
	go func() {
		_ = bus.Watch(ctx, h.tap, bus.BucketStatus, ">", func(u bus.Update[schemas.PodStatusRecord]) {
			if u.Kind == bus.Put {
				mu.Lock()
				bucketHistory[u.Value.Name] = append(bucketHistory[u.Value.Name], u.Value.Status)
				mu.Unlock()
			}
		})
	}()
	factory := informers.NewSharedInformerFactoryWithOptions(admin, 0, informers.WithNamespace(ns))
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			p := obj.(*corev1.Pod)
			mu.Lock()
			apiHistory[p.Name] = append(apiHistory[p.Name], p.Status)
			mu.Unlock()
		},
	})
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	factory.WaitForCacheSync(ctx.Done())

	var pods []*corev1.Pod
	for i, policy := range []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyAlways, corev1.RestartPolicyNever, corev1.RestartPolicyNever} {
		name := fmt.Sprintf("svc-%d", i)
		if policy == corev1.RestartPolicyNever {
			name = fmt.Sprintf("job-%d", i)
		}
		p := apiPod(ns, name, "", "app")
		p.Spec.RestartPolicy = policy
		created, err := admin.CoreV1().Pods(ns).Create(ctxT(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, created)
		h.desire(created, schemas.SourceAPI)
		h.admit(created)
	}

	logPath := filepath.Join(t.TempDir(), "status.log")
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("nodelet-status log (tail):\n%s", b)
		}
	}()
	sv := supervise(t, newCmd, logPath)

	const rounds = 12
	for r := 1; r <= rounds; r++ {
		for _, p := range pods {
			o := runningObserved(p, "10.88.1.1", uint64(r))
			c := &o.Containers[0]
			if p.Spec.RestartPolicy == corev1.RestartPolicyAlways {
				c.RestartCount = int32(r / 3)
				c.ContainerID = fmt.Sprintf("%s-%d", c.ContainerID, r/3)
			} else if r >= 6 && r != 8 {
				c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
					StartedAt: metav1.NewTime(began), FinishedAt: metav1.NewTime(began.Add(time.Second))}}
				// The runtime has torn the pod down: only then is its
				// phase terminal.
				o.Terminated = true
			}
			// Round 8 reports a completed job running again: a stale
			// report that must not take its status back.
			h.observe(p, o)
			h.runtime.Emit(schemas.Event{
				Object: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: p.Name, UID: p.UID},
				Type:   corev1.EventTypeNormal, Reason: fmt.Sprintf("Churn%d", r), Message: fmt.Sprintf("round %d of %s", r, p.Name),
			})
		}
		time.Sleep(400 * time.Millisecond)
		if r%3 == 0 && r < rounds {
			sv.kill()
		}
	}

	// Convergence in the API.
	for _, p := range pods {
		if p.Spec.RestartPolicy == corev1.RestartPolicyAlways {
			waitPod(t, admin, ns, p.Name, p.Name+" running with 4 restarts", func(ap *corev1.Pod) bool {
				return ap.Status.Phase == corev1.PodRunning && len(ap.Status.ContainerStatuses) == 1 && ap.Status.ContainerStatuses[0].RestartCount == rounds/3
			})
		} else {
			waitPod(t, admin, ns, p.Name, p.Name+" Succeeded", func(ap *corev1.Pod) bool { return ap.Status.Phase == corev1.PodSucceeded })
		}
	}

	// Every event exactly once.
	err := eventually.Poll(t.Context(), clock.RealClock{}, 90*time.Second, eventually.Interval, func() error {
		evs, err := admin.CoreV1().Events(ns).List(ctxT(t), metav1.ListOptions{})
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, e := range evs.Items {
			key := e.InvolvedObject.Name + "/" + e.Reason
			seen[key] += int(e.Count)
			if seen[key] > 1 {
				return fmt.Errorf("event %s posted %d times: %+v", key, seen[key], e)
			}
		}
		for _, p := range pods {
			for r := 1; r <= rounds; r++ {
				if key := fmt.Sprintf("%s/Churn%d", p.Name, r); seen[key] != 1 {
					return fmt.Errorf("event %s is missing", key)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if extra != nil {
		extra()
	}
	// BirthCry: one Starting per start, all counted on one event (the
	// correlator was primed with the earlier ones after every restart).
	err = eventually.Poll(t.Context(), clock.RealClock{}, 60*time.Second, eventually.Interval, func() error {
		evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctxT(t), metav1.ListOptions{FieldSelector: startingSelector})
		if err != nil {
			return err
		}
		var mine []corev1.Event
		for _, e := range evs.Items {
			if !earlier[e.Name] {
				mine = append(mine, e)
			}
		}
		// A start counts once its BirthCry is on the bus: a process killed
		// before it got there (the supervisor's kill may land on one just
		// launched) started nothing the API should count.
		starts := startingOnBus(t, h.tap)
		if starts < 2 || starts > sv.startCount() {
			t.Fatalf("%d Starting events on the bus for %d processes started", starts, sv.startCount())
		}
		if len(mine) != 1 || int(mine[0].Count) != starts {
			return fmt.Errorf("%d Starting events since the test began (%+v), want one counting the %d on the bus", len(mine), mine, starts)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, p := range pods {
		checkMonotonic(t, "bucket", p, bucketHistory[p.Name])
		checkMonotonic(t, "API", p, apiHistory[p.Name])
	}
}

// startingOnBus counts the Starting events nodelet-status published on
// this test's bus (its own events stream).
func startingOnBus(t *testing.T, c *bus.Conn) int {
	t.Helper()
	ctx := ctxT(t)
	stream := bus.EventsStream(bus.Status)
	s, err := c.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	total := s.CachedInfo().State.Msgs
	if total == 0 {
		return 0
	}
	oc, err := c.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for read := uint64(0); read < total; read++ {
		msg, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("%s: read %d of %d: %v", stream, read, total, err)
		}
		if _, ev, err := schemas.Decode[schemas.Event](msg.Data()); err == nil && ev.Reason == EventStarting {
			n++
		}
	}
	return n
}

// checkMonotonic fails when a status in history goes behind an earlier one.
func checkMonotonic(t *testing.T, where string, pod *corev1.Pod, history []corev1.PodStatus) {
	t.Helper()
	if len(history) == 0 {
		t.Errorf("%s: no status of %s seen", where, pod.Name)
		return
	}
	for i := 1; i < len(history); i++ {
		prev, cur := history[i-1], history[i]
		if podutil.IsTerminalPhase(prev.Phase) && cur.Phase != prev.Phase {
			t.Errorf("%s: %s went from %s to %s", where, pod.Name, prev.Phase, cur.Phase)
		}
		if prev.Phase == corev1.PodRunning && (cur.Phase == corev1.PodPending || cur.Phase == "") {
			t.Errorf("%s: %s went from Running back to %q", where, pod.Name, cur.Phase)
		}
		for _, pc := range prev.ContainerStatuses {
			cc := statusByName(cur.ContainerStatuses, pc.Name)
			if cc == nil {
				continue
			}
			if cc.RestartCount < pc.RestartCount {
				t.Errorf("%s: %s/%s restartCount %d -> %d", where, pod.Name, pc.Name, pc.RestartCount, cc.RestartCount)
			}
			if pod.Spec.RestartPolicy == corev1.RestartPolicyNever && pc.State.Terminated != nil && cc.State.Terminated == nil {
				t.Errorf("%s: %s/%s terminated -> %+v", where, pod.Name, pc.Name, cc.State)
			}
		}
	}
}
