package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Container waiting reasons of image problems, the kubelet's.
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	reasonErrImageNeverPull = "ErrImageNeverPull"
	reasonInvalidImageName  = "InvalidImageName"
	reasonImageInspectError = "ImageInspectError"
)

// waitError is why a container cannot start yet: its Waiting reason and
// message (ErrImagePull, CrashLoopBackOff, CreateContainerConfigError, ...).
type waitError struct {
	Reason  string
	Message string
	// Retry is when to try again (0: at the next sync).
	Retry time.Duration
}

func (e *waitError) Error() string { return e.Reason + ": " + e.Message }

// imagePuller is the kubelet's image manager: EnsureImageExists with the
// pull policies, pull back-off per pod and image, at most one pull of an
// image at a time however many pods want it, and at most maxParallel pulls
// of different images.
type imagePuller struct {
	is      internalapi.ImageManagerService
	clock   clock.Clock
	backoff *backOff
	sem     chan struct{}

	mu       sync.Mutex
	inflight map[string]*pullCall
	// pulled records a successful pull: its size, and how long it took
	// from asking, the wait for a pull slot included (nil: nothing).
	pulled func(size uint64, took time.Duration)
}

type pullCall struct {
	done    chan struct{}
	ref     string
	size    uint64
	err     error
	waited  time.Duration
	pulling time.Duration
}

func newImagePuller(is internalapi.ImageManagerService, clk clock.Clock, maxParallel int, maxBackOff time.Duration) *imagePuller {
	if maxParallel <= 0 {
		maxParallel = 1
	}
	return &imagePuller{
		is: is, clock: clk,
		backoff:  newBackOff(clk, initialBackOff, maxBackOff),
		sem:      make(chan struct{}, maxParallel),
		inflight: map[string]*pullCall{},
	}
}

// pullPolicy is c's policy, defaulted as the API server would.
func pullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	return podutil.DefaultPullPolicy(c.Image)
}

// ensure makes sure c's image is on the node and returns its image ID, or
// the reason the container must wait. event reports Pulling, Pulled,
// BackOff, Failed and ErrImageNeverPull as the kubelet does.
func (p *imagePuller) ensure(ctx context.Context, pod *corev1.Pod, c *corev1.Container,
	auths []*runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig,
	event func(typ, reason, msg string)) (string, *runtimeapi.Image, *waitError) {
	image := c.Image
	if _, err := name.ParseReference(image, name.WeakValidation); err != nil || image == "" {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", image, err)
		event(corev1.EventTypeWarning, reasonInvalidImageName, msg)
		return "", nil, &waitError{Reason: reasonInvalidImageName, Message: msg}
	}
	policy := pullPolicy(c)
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: image}
	st, err := p.is.ImageStatus(ctx, spec, false)
	if err != nil {
		msg := fmt.Sprintf("Failed to inspect image %q: %v", image, err)
		event(corev1.EventTypeWarning, "InspectFailed", msg)
		return "", nil, &waitError{Reason: reasonImageInspectError, Message: msg, Retry: 2 * time.Second}
	}
	present := st.GetImage() != nil
	if present && policy != corev1.PullAlways {
		event(corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", image))
		return st.Image.Id, st.Image, nil
	}
	if !present && policy == corev1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
		event(corev1.EventTypeWarning, reasonErrImageNeverPull, msg)
		return "", nil, &waitError{Reason: reasonErrImageNeverPull, Message: msg}
	}
	key := string(pod.UID) + "_" + image
	if left, _ := p.backoff.Remaining(key); left > 0 {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		event(corev1.EventTypeNormal, "BackOff", msg)
		return "", nil, &waitError{Reason: reasonImagePullBackOff, Message: msg, Retry: left}
	}
	event(corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", image))
	call := p.pull(ctx, spec, auths, sandbox)
	if call.err != nil {
		p.backoff.Failed(key)
		msg := fmt.Sprintf("Failed to pull image %q: %v", image, call.err)
		event(corev1.EventTypeWarning, "Failed", msg)
		event(corev1.EventTypeWarning, "Failed", "Error: "+reasonErrImagePull)
		// Sync again soon, so that the wait shows as ImagePullBackOff.
		return "", nil, &waitError{Reason: reasonErrImagePull, Message: msg, Retry: time.Second}
	}
	p.backoff.Reset(key)
	event(corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes.",
		image, call.pulling.Round(time.Millisecond), (call.pulling+call.waited).Round(time.Millisecond), call.size))
	st, err = p.is.ImageStatus(ctx, spec, false)
	if err == nil && st.GetImage() != nil {
		return st.Image.Id, st.Image, nil
	}
	return call.ref, nil, nil
}

// pull pulls spec, joining a pull of the same image already in flight.
func (p *imagePuller) pull(ctx context.Context, spec *runtimeapi.ImageSpec, auths []*runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) *pullCall {
	// Pods that pull with other credentials must not share a pull that
	// may fail (or succeed) for reasons of credentials.
	key := spec.Image
	for _, a := range auths {
		key += "\x00" + a.Username + ":" + a.Password + ":" + a.Auth + ":" + a.IdentityToken + ":" + a.RegistryToken
	}
	p.mu.Lock()
	if call, ok := p.inflight[key]; ok {
		p.mu.Unlock()
		select {
		case <-call.done:
			return call
		case <-ctx.Done():
			return &pullCall{err: ctx.Err()}
		}
	}
	call := &pullCall{done: make(chan struct{})}
	p.inflight[key] = call
	p.mu.Unlock()

	defer func() {
		p.mu.Lock()
		delete(p.inflight, key)
		p.mu.Unlock()
		close(call.done)
	}()
	began := p.clock.Now()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		call.err = ctx.Err()
		return call
	}
	defer func() { <-p.sem }()
	call.waited = p.clock.Since(began)
	began = p.clock.Now()
	if len(auths) == 0 {
		auths = []*runtimeapi.AuthConfig{nil}
	}
	for _, auth := range auths {
		call.ref, call.err = p.is.PullImage(ctx, spec, auth, sandbox)
		if call.err == nil {
			break
		}
	}
	call.pulling = p.clock.Since(began)
	if call.err == nil {
		if st, err := p.is.ImageStatus(ctx, spec, false); err == nil && st.GetImage() != nil {
			call.size = st.Image.Size
		}
		if p.pulled != nil {
			p.pulled(call.size, call.waited+call.pulling)
		}
	}
	return call
}

// forgetPod drops a pod's pull back-offs.
func (p *imagePuller) forgetPod(uid string) { p.backoff.Forget(uid + "_") }
