// Package gc is nodelet-gc: the kubelet's container GC, image manager,
// container log manager and eviction manager as one daemon that reclaims the
// node's resources.
//
// It reads the desired pods, the sources' readiness, the runtime's observed
// pods and its own evictions from the bus, talks to CRI directly for what it
// removes, and writes three buckets: the node's pressure conditions
// (MemoryPressure, DiskPressure, PIDPressure), pod evictions (the runtime
// kills an evicted pod, status makes it Failed with reason Evicted), and the
// image records that keep image GC's least-recently-used order across
// restarts.
//
// It only ever touches containers and sandboxes labelled io.nodelet.managed=true,
// and never removes what status still needs: a pod's content (every dead
// container, its sandboxes and log directory) goes only when the pod is gone
// from the sources (or evicted) and the runtime reports it final; for every
// other pod the newest dead instance of each container is kept whatever
// maxPerPodContainer and maxContainers say (nodelet-status derives a
// container's last state from it), and so is its newest sandbox. Only under
// disk pressure, as the kubelet, do the dead containers of pods whose
// runtime is final (completed pods that still exist) all go as well.
//
// Every pass is idempotent and keeps no state that the bus and CRI cannot
// give back, so a SIGKILL in the middle of one is followed by a pass that
// finishes the job and removes nothing more.
//
// # Graceful node shutdown
//
// With gc.shutdownGracePeriod set, the kubelet's node shutdown manager runs
// here (shutdown.go, logind.go): a systemd-logind delay inhibitor lock over
// D-Bus, and on PrepareForShutdown the node marked shutting down in the
// pressure record and its pods terminated by priority group through
// eviction records with reason Terminated.
//
// # Events and logs
//
// Events carry the kubelet's reasons: ContainerGCFailed, ImageGCFailed,
// FreeDiskSpaceFailed and InvalidDiskCapacity on the node; EvictionThresholdMet
// on the node and Evicted on the pod. The pressure conditions' events
// (NodeHasInsufficientMemory, …) are nodelet-status's, recorded when it sets
// the condition on the Node (nodestatus.PressureConditions has the wording).
// Like the kubelet, single removals (a container, sandbox, image, log file or
// directory) are not events but log lines, and counted in the metrics (see
// Gatherer).
package gc

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
)

// Run serves until ctx is done.
func Run(ctx context.Context, env *daemon.Env) error {
	clients, err := cri.Dial(ctx, &env.Config.Runtime)
	if err != nil {
		return err
	}
	g, err := New(Options{
		Deps:    env.Deps(),
		Runtime: clients.Runtime,
		Images:  clients.Image,
	})
	if err != nil {
		return err
	}
	return g.Run(ctx)
}

// Options are what New needs. Config, Bus, Runtime and Images are required.
type Options struct {
	daemon.Deps
	Runtime internalapi.RuntimeService
	Images  internalapi.ImageManagerService
	// Clock drives periods, ages and grace periods. Default: the real clock.
	Clock clock.WithTicker
	// Measurer measures node and pod usage. Default: /proc, cgroups, statfs
	// and CRI (see nodeMeasurer).
	Measurer Measurer
}

// Daemon is one nodelet-gc: it builds the parts and runs their loops.
type Daemon struct {
	cfg       *config.Config
	log       *slog.Logger
	bus       *bus.Conn
	clock     clock.WithTicker
	measure   Measurer
	setHealth func(bool, string)

	// What gc knows of the node's pods, and what it writes for them.
	state     *podState
	events    *eventRecorder
	evictions *evictionRecords

	// The parts, one per kubelet manager.
	containers *containerGC
	images     *imageGC
	logs       *containerLogManager
	eviction   *evictionManager
}

// New builds a GC; it does nothing until Run (or a pass) is called.
func New(o Options) (*Daemon, error) {
	if o.Config == nil || o.Bus == nil || o.Runtime == nil || o.Images == nil {
		return nil, fmt.Errorf("gc: Config, Bus, Runtime and Images are required")
	}
	g := &Daemon{
		cfg: o.Config, log: o.Log, bus: o.Bus,
		clock: o.Clock, measure: o.Measurer, setHealth: o.SetHealth,
		state: newPodState(),
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.clock == nil {
		g.clock = clock.RealClock{}
	}
	if g.setHealth == nil {
		g.setHealth = func(bool, string) {}
	}
	began := g.clock.Now()
	if g.measure == nil {
		g.measure = &nodeMeasurer{
			procDir: "/proc", cgroupDir: "/sys/fs/cgroup",
			stateDir: o.Config.Node.StateDir, podLogsDir: o.Config.Node.PodLogsDir,
			runtime: o.Runtime, images: o.Images, clock: g.clock,
			emptyDirsOf: g.emptyDirsOf,
		}
	}
	q, err := resource.ParseQuantity(o.Config.GC.ContainerLogMaxSize)
	if err != nil {
		return nil, fmt.Errorf("gc.containerLogMaxSize %q: %w", o.Config.GC.ContainerLogMaxSize, err)
	}
	if o.Config.GC.ContainerLogMaxFiles < 2 {
		return nil, fmt.Errorf("gc.containerLogMaxFiles %d: must be at least 2", o.Config.GC.ContainerLogMaxFiles)
	}
	thresholds, err := parseThresholds(o.Config.GC)
	if err != nil {
		return nil, err
	}
	g.logs = &containerLogManager{
		maxSize: q.Value(), maxFiles: o.Config.GC.ContainerLogMaxFiles,
		log: g.log, clock: g.clock, rt: o.Runtime,
	}
	g.events = &eventRecorder{bus: o.Bus, nodeName: o.Config.Node.Name, clock: g.clock}
	g.evictions = newEvictionRecords(o.Bus, g.log, g.state)
	g.containers = &containerGC{
		policy: &o.Config.GC, podLogsDir: o.Config.Node.PodLogsDir,
		log: g.log, clock: g.clock, rt: o.Runtime, state: g.state, evictions: g.evictions,
	}
	g.images = newImageGC(o.Bus, &imageGC{
		policy: &o.Config.GC, sandboxImage: o.Config.Runtime.SandboxImage,
		log: g.log, clock: g.clock, began: began,
		rt: o.Runtime, img: o.Images, measure: g.measure, events: g.events,
	})
	g.eviction = newEvictionManager(thresholds, o.Config.GC.EvictionPressureTransitionPeriod, &evictionManager{
		log: g.log, clock: g.clock, bus: o.Bus, measure: g.measure,
		pods: g.state, evictions: g.evictions, events: g.events,
		containers: g.containers, images: g.images,
	})
	return g, nil
}

// Run starts the state watch and the four loops — container GC, image GC,
// log rotation and eviction — and returns when ctx is done.
func (g *Daemon) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { g.state.run(ctx, g.bus) })
	if g.cfg.GC.ShutdownGracePeriod > 0 {
		sm := newShutdownManager(g, connectLogind)
		wg.Go(func() { sm.run(ctx) })
	}
	gcCfg := g.cfg.GC
	wg.Go(func() {
		g.every(ctx, "container", gcCfg.ContainerGCPeriod, func(ctx context.Context) error {
			_, err := g.containers.garbageCollect(ctx, false)
			if err != nil {
				g.events.nodeEvent(corev1.EventTypeWarning, "ContainerGCFailed", err.Error())
			}
			return err
		})
	})
	if gcCfg.ImageGCHighThresholdPercent == 100 {
		// As the kubelet: a high threshold of 100 % turns image GC off.
		g.log.Info("ImageGCHighThresholdPercent is set 100, Disable image GC")
	} else {
		wg.Go(func() {
			g.every(ctx, "image", gcCfg.ImageGCPeriod, func(ctx context.Context) error {
				_, err := g.images.garbageCollect(ctx)
				return err
			})
		})
	}
	wg.Go(func() { g.every(ctx, "log_rotation", gcCfg.ContainerLogMonitorInterval, g.logs.rotateLogs) })
	wg.Go(func() {
		g.every(ctx, "eviction", gcCfg.EvictionMonitoringPeriod, func(ctx context.Context) error {
			evicted, err := g.eviction.synchronize(ctx)
			if len(evicted) > 0 {
				g.eviction.waitForPodsCleanup(ctx, evicted)
			}
			return err
		})
	})
	wg.Wait()
	return nil
}

// every runs pass now and then every period until ctx is done, like the
// kubelet's wait.Until loops. The first pass waits for the bus state so a
// freshly started gc does not decide on an empty picture.
func (g *Daemon) every(ctx context.Context, name string, period time.Duration, pass func(context.Context) error) {
	for !g.state.synced() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t := g.clock.NewTicker(period)
	defer t.Stop()
	for {
		began := time.Now()
		err := pass(ctx)
		passDuration.WithLabelValues(name).Observe(time.Since(began).Seconds())
		if err != nil && ctx.Err() == nil {
			passFailures.WithLabelValues(name).Inc()
			g.log.Error("Garbage collection pass failed", "pass", name, "err", err)
		}
		g.passHealth(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// passHealth reports gc unready when a pass could not reach the runtime,
// and ready again as soon as a pass succeeds: the latest outcome wins, so a
// loop with a long period does not hold a stale verdict.
func (g *Daemon) passHealth(err error) {
	switch {
	case err == nil:
		g.setHealth(true, "")
	case isUnavailable(err):
		g.setHealth(false, "container runtime unreachable: "+err.Error())
	}
}

// podLogDir is the kubelet's pod log directory, <podLogsDir>/<ns>_<name>_<uid>.
func podLogDir(root, namespace, name, uid string) string {
	return filepath.Join(root, namespace+"_"+name+"_"+uid)
}

// podUIDFromLogDir is the kubelet's parsePodUIDFromLogsDirectory.
func podUIDFromLogDir(name string) string {
	parts := strings.Split(name, "_")
	return parts[len(parts)-1]
}

// emptyDirsOf is where nodelet-runtime keeps a pod's emptyDir volumes (the
// kubelet's layout).
func (g *Daemon) emptyDirsOf(uid string) string {
	return filepath.Join(g.cfg.Node.StateDir, "pods", uid, "volumes", "kubernetes.io~empty-dir")
}

func isUnavailable(err error) bool {
	s, ok := status.FromError(err)
	if ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded) {
		return true
	}
	return strings.Contains(err.Error(), "code = Unavailable")
}
