package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// faultSizes returns how many pods run before the faults and how many are
// being created during each: the short suite by default, the 30
// and 20 with NODELET_FAULTS_LONG=1 (scripts/faults.sh).
func faultSizes() (running, creating int) {
	if os.Getenv("NODELET_FAULTS_LONG") != "" {
		return 30, 20
	}
	return 6, 2
}

// statusMonitor watches the status bucket and records any pod whose status
// goes backwards: phase Running → Pending, a restart count that drops, or
// a running container whose ID changes.
type statusMonitor struct {
	mu       sync.Mutex
	last     map[string]corev1.PodStatus
	problems []string
}

func (m *statusMonitor) observe(u bus.Update[schemas.PodStatusRecord]) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u.Kind != bus.Put {
		return
	}
	st := u.Value.Status
	prev, ok := m.last[u.Key]
	if ok {
		name := u.Value.Namespace + "/" + u.Value.Name
		if prev.Phase == corev1.PodRunning && st.Phase == corev1.PodPending {
			m.problems = append(m.problems, name+": phase Running → Pending")
		}
		for _, pc := range prev.ContainerStatuses {
			for _, c := range st.ContainerStatuses {
				if c.Name != pc.Name {
					continue
				}
				if c.RestartCount < pc.RestartCount {
					m.problems = append(m.problems, fmt.Sprintf("%s/%s: restartCount %d → %d", name, c.Name, pc.RestartCount, c.RestartCount))
				}
				if pc.State.Running != nil && c.State.Running == nil {
					m.problems = append(m.problems, fmt.Sprintf("%s/%s: running → %+v", name, c.Name, c.State))
				}
			}
		}
	}
	m.last[u.Key] = st
}

// TestFaults kills each daemon in turn, then the bus, then everything at
// once, restarts containerd, then wipes the bus's store, while pods run and more are being
// created; after each fault every pod must reach Running with no container
// restarted, no status regressed and no duplicate sandbox.
func TestFaults(t *testing.T) {
	running, creating := faultSizes()
	// Every fault adds pods and none go: room for all of them (the long
	// suite holds 230, past the default maxPods of 110).
	faultCount := len(bus.Daemons) + 4
	n := e2e.NewNode(t, e2e.NodeOptions{Node: fmt.Sprintf("  maxPods: %d\n", running+creating*faultCount)})
	names := map[string]bool{}
	add := func(k int, prefix string) {
		for i := 0; i < k; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			names[name+"-"+nodeName] = true
			n.WriteManifest(name+".yaml", e2e.SleeperManifest(name))
		}
	}
	allRunning := func() (bool, string) {
		l, err := n.Pods()
		if err != nil {
			return false, err.Error()
		}
		seen := 0
		var waiting []string
		for _, p := range l.Items {
			if !names[p.Name] {
				continue
			}
			seen++
			if !e2e.RunningReady(&p) {
				waiting = append(waiting, p.Name+"="+string(p.Status.Phase))
			}
		}
		if seen != len(names) {
			return false, fmt.Sprintf("/pods lists %d of %d pods", seen, len(names))
		}
		if len(waiting) > 0 {
			sort.Strings(waiting)
			return false, "not running: " + strings.Join(waiting, " ")
		}
		view := e2e.CRIView(t, ctrd)
		for _, p := range l.Items {
			if !names[p.Name] {
				continue
			}
			c := view[string(p.UID)]
			if c == nil || c.ReadySandboxes != 1 || c.Sandboxes != 1 || c.Running != 1 {
				return false, fmt.Sprintf("CRI of %s: %+v", p.Name, c)
			}
		}
		return true, ""
	}
	waitConverged := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		var why string
		for time.Since(start) < 5*time.Minute {
			var ok bool
			if ok, why = allRunning(); ok {
				return time.Since(start)
			}
			time.Sleep(250 * time.Millisecond)
		}
		n.ExplainStuck(why)
		t.Fatalf("%s: not converged after 5m: %s", what, why)
		return 0
	}

	add(running, "base")
	waitConverged("initial pods")
	baseline := e2e.CRIView(t, ctrd)

	mon := &statusMonitor{last: map[string]corev1.PodStatus{}}
	tapConn := n.Connect(bus.Tap)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = bus.Watch(ctx, tapConn, bus.BucketStatus, ">", mon.observe) }()

	pids := func() map[string]supervisor.ProcState { return n.WaitReady() }
	// kill SIGKILLs the named processes and waits until the supervisor
	// has them all back (new pids, ready).
	kill := func(names ...string) {
		st := pids()
		for _, name := range names {
			if err := syscall.Kill(st[name].PID, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %s: %v", name, err)
			}
		}
		eventually.True(t, 2*time.Minute, "killed processes restarted", func() bool {
			now, err := supervisor.ReadState(n.StateDir)
			if err != nil {
				return false
			}
			for _, p := range now {
				for _, name := range names {
					if p.Name == name && (p.PID == st[name].PID || p.State != "ready") {
						return false
					}
				}
			}
			return true
		})
	}
	type fault struct {
		name  string
		apply func()
	}
	faults := []fault{}
	for _, d := range bus.Daemons {
		d := d
		faults = append(faults, fault{d, func() { kill(d) }})
	}
	faults = append(faults,
		fault{"bus", func() { kill("bus") }},
		fault{"all", func() { kill("bus", bus.Sources, bus.Admission, bus.Runtime, bus.Prober, bus.Status, bus.GC) }},
		// containerd restarted under the node (its shims and containers
		// keep running): CRI and the event stream come back.
		fault{"containerd", func() {
			if err := ctrd.Restart(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		fault{"wipe", func() {
			n.Stop()
			if err := os.RemoveAll(filepath.Join(n.StateDir, "bus")); err != nil {
				t.Fatal(err)
			}
			n.Start()
			n.WaitReady()
		}},
	)
	if len(faults) != faultCount {
		t.Fatalf("%d faults, room made for %d", len(faults), faultCount)
	}
	var report []string
	for i, f := range faults {
		add(creating, fmt.Sprintf("f%d", i))
		time.Sleep(300 * time.Millisecond) // the new pods are mid-creation
		start := time.Now()
		f.apply()
		waitConverged("after killing " + f.name)
		took := time.Since(start)
		report = append(report, fmt.Sprintf("%-10s converged in %s", f.name, took.Round(10*time.Millisecond)))
		now := e2e.CRIView(t, ctrd)
		for uid, b := range baseline {
			if b.ContainerID == "" {
				continue
			}
			if c := now[uid]; c == nil || c.ContainerID != b.ContainerID || c.RestartCount != b.RestartCount {
				t.Fatalf("after %s: pod %s container restarted: %+v → %+v", f.name, uid, b, c)
			}
		}
		mon.mu.Lock()
		if len(mon.problems) > 0 {
			t.Fatalf("after %s: statuses went backwards: %v", f.name, mon.problems)
		}
		mon.mu.Unlock()
	}
	t.Logf("fault convergence (%d pods running, %d created during each fault):\n%s", running, creating, strings.Join(report, "\n"))
}
