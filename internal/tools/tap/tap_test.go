package tap

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// syncBuffer is what tap writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, out *syncBuffer, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in tap output:\n%s", what, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func podEvent(uid, reason, msg string) schemas.Event {
	return schemas.Event{
		Object: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: types.UID(uid)},
		Type:   corev1.EventTypeWarning, Reason: reason, Message: msg,
	}
}

func emit(t *testing.T, c *bus.Conn, ev schemas.Event) {
	t.Helper()
	c.Emit(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
}

// startTap runs tap as the tap credential until the test ends.
func startTap(t *testing.T, b *bustest.Bus, o Options) *syncBuffer {
	t.Helper()
	c := b.Connect(bus.Tap)
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, o, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tap.Run: %v", err)
		}
	})
	return out
}

// tapping returns once tap shows live messages: it publishes heartbeats
// as c until one is printed.
func tapping(t *testing.T, c *bus.Conn, out *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Heartbeat") {
		if time.Now().After(deadline) {
			t.Fatalf("tap shows no heartbeat:\n%s", out.String())
		}
		if err := c.PublishHeartbeat(schemas.Heartbeat{Component: c.Component, Ready: true}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSinceReplaysThenFollows: an event and a bucket update stored before
// tap started are shown with --since, before the separator; an event
// published afterwards follows live; each shows once.
func TestSinceReplaysThenFollows(t *testing.T) {
	b := bustest.Start(t)
	rt := b.Connect(bus.Runtime)
	adm := b.Connect(bus.Admission)
	emit(t, rt, podEvent("uid-1", "BackOff", "Back-off restarting failed container app in pod web_default(uid-1)"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.Put(ctx, bus.BucketAdmission, "uid-1", schemas.AdmissionVerdict{
		UID: "uid-1", Namespace: "default", Name: "web", Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu",
	}); err != nil {
		t.Fatal(err)
	}

	out := startTap(t, b, Options{Since: 10 * time.Minute})
	waitFor(t, out, "live from here")
	before, _, _ := strings.Cut(out.String(), "live from here")
	for _, want := range []string{"BackOff: Back-off restarting failed container app", "pods_admission/uid-1", "rejected OutOfcpu"} {
		if !strings.Contains(before, want) {
			t.Errorf("replay lacks %q:\n%s", want, before)
		}
	}

	emit(t, rt, podEvent("uid-1", "Killing", "Stopping container app"))
	waitFor(t, out, "Killing: Stopping container app")
	got := out.String()
	for _, once := range []string{"BackOff:", "rejected OutOfcpu", "Killing:"} {
		if n := strings.Count(got, once); n != 1 {
			t.Errorf("%q shown %d times:\n%s", once, n, got)
		}
	}
}

// TestSinceWindow: what was stored before the window is not replayed, and
// without --since nothing is.
func TestSinceWindow(t *testing.T) {
	b := bustest.Start(t)
	rt := b.Connect(bus.Runtime)
	emit(t, rt, podEvent("uid-2", "OldNews", "stored before the window"))
	old := time.Now()
	time.Sleep(4 * time.Second)
	emit(t, rt, podEvent("uid-2", "Recent", "stored inside the window"))

	// The window starts a second after OldNews was stored: Recent, stored
	// four seconds after it, is inside unless tap takes more than three
	// seconds to start replaying.
	windowed := startTap(t, b, Options{Since: time.Since(old) - time.Second, Subject: bus.SubjectEventsAll})
	live := startTap(t, b, Options{})
	waitFor(t, windowed, "live from here")
	if got := windowed.String(); !strings.Contains(got, "Recent:") || strings.Contains(got, "OldNews") {
		t.Errorf("--since replayed:\n%s", got)
	}
	tapping(t, rt, live)
	emit(t, rt, podEvent("uid-2", "Fresh", "published while tapping"))
	waitFor(t, live, "Fresh:")
	if got := live.String(); strings.Contains(got, "OldNews") || strings.Contains(got, "Recent:") || strings.Contains(got, "live from here") {
		t.Errorf("tap without --since replayed:\n%s", got)
	}
}

// TestReadStreamFilters reads one pod's events back, oldest first, and
// nothing of another pod.
func TestReadStreamFilters(t *testing.T) {
	b := bustest.Start(t)
	rt := b.Connect(bus.Runtime)
	for _, r := range []string{"Pulling", "Pulled", "Created", "Started"} {
		rt.Emit(podEvent("uid-a", r, r))
		rt.Emit(podEvent("uid-b", r, r))
	}
	emit(t, rt, podEvent("uid-a", "Killing", "Killing"))
	c := b.Connect(bus.Tap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var reasons []string
	err := ReadEvents(ctx, c, "uid-a", time.Time{}, func(s Stored) {
		var ev schemas.Event
		if err := schemas.DecodeInto(s.Msg.Data, &ev); err != nil {
			t.Error(err)
		}
		reasons = append(reasons, ev.Reason)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reasons, ","); got != "Pulling,Pulled,Created,Started,Killing" {
		t.Errorf("uid-a events = %s", got)
	}
	n := 0
	if err := ReadEvents(ctx, c, "uid-none", time.Time{}, func(Stored) { n++ }); err != nil || n != 0 {
		t.Errorf("no events expected: n=%d err=%v", n, err)
	}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func TestColorText(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msg     schemas.Message
		warning bool
	}{
		{"warning event", podEvent("u", "BackOff", "back-off"), true},
		{"normal event", schemas.Event{Type: corev1.EventTypeNormal, Reason: "Started"}, false},
		{"rejected", schemas.AdmissionVerdict{Name: "web", Reason: "OutOfcpu"}, true},
		{"admitted", schemas.AdmissionVerdict{Name: "web", Admitted: true}, false},
		{"not ready", schemas.Heartbeat{Component: "runtime"}, true},
		{"ready", schemas.Heartbeat{Component: "runtime", Ready: true}, false},
		{"crash loop", schemas.PodObserved{Containers: []schemas.ContainerObserved{{Name: "app",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}, true},
		{"creating", schemas.PodObserved{Containers: []schemas.ContainerObserved{{Name: "app",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}, false},
		{"exit 1", schemas.PodObserved{Containers: []schemas.ContainerObserved{{Name: "app",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}}, true},
		{"failed probe", schemas.ProbeResult{Probe: "liveness", Result: schemas.ProbeFailure}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := schemas.Encode("runtime", tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			env, err := schemas.Open(data)
			if err != nil {
				t.Fatal(err)
			}
			if got := Warning(env); got != tc.warning {
				t.Errorf("Warning = %v, want %v", got, tc.warning)
			}
			l, ok := Describe(&nats.Msg{Subject: "nodelet.v1.events.runtime.u", Data: data})
			if !ok {
				t.Fatal("not described")
			}
			plain, colored := l.Text(), l.ColorText()
			if strings.Contains(plain, "\x1b") {
				t.Errorf("Text has escapes: %q", plain)
			}
			if got := ansi.ReplaceAllString(colored, ""); got != plain {
				t.Errorf("ColorText without escapes\n%q\nwant Text\n%q", got, plain)
			}
			if red := strings.Contains(colored, ansiRed); red != tc.warning {
				t.Errorf("red = %v, want %v: %q", red, tc.warning, colored)
			}
		})
	}
}
