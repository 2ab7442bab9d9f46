package runtime

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pullmanager"
)

// noRecords are pull records that never ask for a pull of a present image.
type noRecords struct{}

func (noRecords) PruneUnknownRecords([]string, time.Time)                    {}
func (noRecords) RecordPullIntent(string) error                              { return nil }
func (noRecords) RecordImagePulled(string, string, *pullmanager.Credentials) {}
func (noRecords) RecordImagePullFailed(string)                               {}
func (noRecords) MustAttemptImagePull(string, string, pullmanager.GetPodCredentials) (bool, error) {
	return false, nil
}

// lookHook is an image service whose first ImageStatus runs during()
// before it answers with what it saw when asked: the image absent.
type lookHook struct {
	*critest.FakeImageService
	during func()
}

func (h *lookHook) ImageStatus(ctx context.Context, spec *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	if f := h.during; f != nil {
		h.during = nil
		st, err := h.FakeImageService.ImageStatus(ctx, spec, verbose)
		f()
		return st, err
	}
	return h.FakeImageService.ImageStatus(ctx, spec, verbose)
}

// TestPullEndedAfterLookingIsShared: pod b finds the image absent, and
// before b asks for a pull, pod a's pull of it starts and ends. b shares
// a's pull rather than going to the registry again (the window behind
// "2 pulls for 5 pods" in TestImagePullPolicies); a pod that looks after
// the pull ended and must pull (Always) pulls again, and so does one
// after a failed pull.
func TestPullEndedAfterLookingIsShared(t *testing.T) {
	const image = "registry.test/shared:1"
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fake := critest.NewFakeImageService()
	is := &lookHook{FakeImageService: fake}
	p := newImagePuller(is, clk, 1, time.Minute, nil, noRecords{})
	pod := func(name string, policy corev1.PullPolicy) (*corev1.Pod, *corev1.Container) {
		c := &corev1.Container{Name: "app", Image: image, ImagePullPolicy: policy}
		return &corev1.Pod{ObjectMeta: metaFor(name), Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}}, c
	}
	var events []string
	event := func(_, reason, _ string) { events = append(events, reason) }
	ensure := func(name string, policy corev1.PullPolicy) {
		t.Helper()
		po, c := pod(name, policy)
		if _, _, werr := p.ensure(ctx, po, c, nil, nil, event); werr != nil {
			t.Fatalf("%s: %v", name, werr)
		}
	}
	pulls := func() int {
		fake.Lock()
		defer fake.Unlock()
		n := 0
		for _, c := range fake.Called {
			if c == "PullImage" {
				n++
			}
		}
		return n
	}

	is.during = func() { ensure("a", corev1.PullIfNotPresent) }
	ensure("b", corev1.PullIfNotPresent)
	if n := pulls(); n != 1 {
		t.Fatalf("%d pulls for a and b, want 1 (events %v)", n, events)
	}

	clk.Step(time.Second)
	ensure("c", corev1.PullAlways)
	if n := pulls(); n != 2 {
		t.Fatalf("%d pulls after c (Always, looked after a's pull ended), want 2", n)
	}

	// A failed pull is not shared after it ended: e finds the image gone,
	// d's pull fails before e asks, and e pulls for itself.
	if err := fake.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: image}); err != nil {
		t.Fatal(err)
	}
	fake.InjectError("PullImage", context.DeadlineExceeded)
	is.during = func() {
		po, c := pod("d", corev1.PullAlways)
		if _, _, werr := p.ensure(ctx, po, c, nil, nil, event); werr == nil {
			t.Error("d: the injected pull error was not seen")
		}
	}
	ensure("e", corev1.PullIfNotPresent)
	if n := pulls(); n != 4 {
		t.Fatalf("%d pulls after d failed and e pulled, want 4", n)
	}

	// An ended pull is forgotten once it is older than endedPullKept.
	clk.Step(endedPullKept + time.Second)
	ensure("g", corev1.PullAlways) // ends a pull, which sweeps the old ones
	p.mu.Lock()
	kept := len(p.ended)
	p.mu.Unlock()
	if kept != 1 {
		t.Fatalf("%d ended pulls kept, want only g's", kept)
	}
}

func metaFor(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}
}
