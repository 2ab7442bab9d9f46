package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/credentialprovider"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/pullmanager"
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
// of different images. Credentials come from the pod's pull secrets and
// the node's keyring (credential-provider plugins); records says which
// credentials pulled each image, and whether a pod may use one on the node
// (ensure-secret-pulled-images).
type imagePuller struct {
	is      internalapi.ImageManagerService
	clock   Clock
	backoff *backOff
	sem     chan struct{}
	// node is the node's keyring: the credential-provider plugins (nil:
	// none), asked for each pod (ForPod).
	node *credentialprovider.Plugins
	// records are the pull records (internal/pullmanager).
	records pullRecords

	mu       sync.Mutex
	inflight map[string]*pullCall
	// ended is the last successful pull of each key, kept for a while:
	// a pod that found the image absent just before a pull of it ended
	// shares that pull as if it had been in flight when it looked. ends
	// counts the pulls ended; a pull's number tells whether it ended
	// after a pod looked.
	ended map[string]*pullCall
	ends  uint64
	// pulled records a successful pull: its size, and how long it took
	// from asking, the wait for a pull slot included (nil: nothing).
	pulled func(size uint64, took time.Duration)
}

// pullRecords is what the puller needs of the kubelet's image pull manager
// (internal/pullmanager.Manager).
type pullRecords interface {
	PruneUnknownRecords(imageRefs []string, until time.Time)
	RecordPullIntent(image string) error
	RecordImagePulled(image, imageRef string, creds *pullmanager.Credentials)
	RecordImagePullFailed(image string)
	MustAttemptImagePull(image, imageRef string, getPodCredentials pullmanager.GetPodCredentials) (bool, error)
}

// endedPullKept is how long an ended pull may be shared: enough for the
// pods that looked while it ran to get to it.
const endedPullKept = time.Minute

type pullCall struct {
	done    chan struct{}
	ref     string
	size    uint64
	err     error
	waited  time.Duration
	pulling time.Duration
	// used is the credential the pull succeeded with (nil: none needed).
	used *credentialprovider.TrackedAuthConfig
	// n is the call's number among the puller's ends, endedAt when it
	// ended (set under the puller's lock as it ends).
	n       uint64
	endedAt time.Time
}

func newImagePuller(is internalapi.ImageManagerService, clk Clock, maxParallel int, maxBackOff time.Duration,
	node *credentialprovider.Plugins, records pullRecords) *imagePuller {
	if maxParallel <= 0 {
		maxParallel = 1
	}
	return &imagePuller{
		is: is, clock: clk, node: node, records: records,
		backoff:  newBackOff(clk, initialBackOff, maxBackOff),
		sem:      make(chan struct{}, maxParallel),
		inflight: map[string]*pullCall{},
		ended:    map[string]*pullCall{},
	}
}

// imageCredentials sets up what pulls need beyond CRI: the
// credential-provider plugins of runtime.imageCredentialProviderConfig
// (the kubelet's RegisterCredentialProviderPlugins; nil when unset), with
// sa for those in service-account token mode (nil without an API), and
// the pull records under <node.stateDir>/image_manager with the
// verification policy (the kubelet's NewImagePullManager over its
// FSPullRecordsAccessor). A bad plugin configuration is an error naming
// the key.
func imageCredentials(cfg *config.Config, is internalapi.ImageManagerService, sa credentialprovider.ServiceAccounts, log *slog.Logger) (*credentialprovider.Plugins, *pullmanager.Manager, error) {
	var node *credentialprovider.Plugins
	rc := &cfg.Runtime
	if rc.ImageCredentialProviderConfig != "" || rc.ImageCredentialProviderBinDir != "" {
		plugins, err := credentialprovider.NewPlugins(rc.ImageCredentialProviderConfig, rc.ImageCredentialProviderBinDir, sa, log)
		if err != nil {
			return nil, nil, &config.Error{Key: "runtime.imageCredentialProviderConfig", Problem: "Failed to register CRI auth plugins: " + err.Error()}
		}
		node = plugins
	}
	policy, err := pullmanager.NewPolicy(rc.ImagePullCredentialsVerificationPolicy, rc.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return nil, nil, &config.Error{Key: "runtime.imagePullCredentialsVerificationPolicy", Problem: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), rc.RuntimeRequestTimeout)
	defer cancel()
	records, err := pullmanager.New(ctx, filepath.Join(cfg.Node.StateDir, "image_manager"), policy, is, log)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to set up the image pull records: %w", err)
	}
	return node, records, nil
}

// recordsPrunePeriod is how often pull records of images gone are pruned:
// the kubelet's image GC period (ImageGCPeriod), after which it runs the
// pruning as a post-GC hook.
const recordsPrunePeriod = 5 * time.Minute

// pruneRecordsLoop removes the pull records of images the runtime no
// longer has, every recordsPrunePeriod. The kubelet prunes after each of
// its image garbage collections; here nodelet-gc collects images, so the
// runtime, which owns the records, compares them with CRI's image list
// instead, and so also forgets images removed by other hands.
func (p *imagePuller) pruneRecordsLoop(ctx context.Context) {
	t := p.clock.NewTicker(recordsPrunePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			p.pruneRecords(ctx)
		}
	}
}

func (p *imagePuller) pruneRecords(ctx context.Context) {
	start := p.clock.Now()
	images, err := p.is.ListImages(ctx, nil)
	if err != nil {
		return // the next period tries again
	}
	refs := make([]string, 0, len(images))
	for _, img := range images {
		refs = append(refs, img.GetId())
	}
	p.records.PruneUnknownRecords(refs, start)
}

// pullPolicy is c's policy, defaulted as the API server would.
func pullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	return podutil.DefaultPullPolicy(c.Image)
}

// ensure makes sure c's image is on the node and may be used by pod, and
// returns its image ID, or the reason the container must wait (the
// kubelet's imageManager.EnsureImageExists). An image on the node is used
// without a pull when the pull records say the pod's credentials could
// pull it (or the verification policy needs no such proof); otherwise it
// is pulled with them, or with Never refused as if absent, so that a pod
// learns nothing of an image it may not pull. event reports Pulling,
// Pulled, BackOff, Failed and ErrImageNeverPull as the kubelet does.
func (p *imagePuller) ensure(ctx context.Context, pod *corev1.Pod, c *corev1.Container,
	secrets []corev1.Secret, sandbox *runtimeapi.PodSandboxConfig,
	event func(typ, reason, msg string)) (string, *runtimeapi.Image, *waitError) {
	image := c.Image
	if _, err := name.ParseReference(image, name.WeakValidation); err != nil || image == "" {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", image, err)
		event(corev1.EventTypeWarning, reasonInvalidImageName, msg)
		return "", nil, &waitError{Reason: reasonInvalidImageName, Message: msg}
	}
	policy := pullPolicy(c)
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: image}
	// Taken before the image is looked at: a pull of it that ends after
	// this is shared (pull).
	looked := p.pullsEnded()
	var present *runtimeapi.Image
	if policy != corev1.PullAlways {
		st, err := p.is.ImageStatus(ctx, spec, false)
		if err != nil {
			msg := fmt.Sprintf("Failed to inspect image %q: %v", image, err)
			event(corev1.EventTypeWarning, "InspectFailed", msg)
			return "", nil, &waitError{Reason: reasonImageInspectError, Message: msg, Retry: 2 * time.Second}
		}
		present = st.GetImage()
	}
	neverPull := func() (string, *runtimeapi.Image, *waitError) {
		// The kubelet's imageNotPresentOnNeverPolicyError: the same words
		// whether the image is absent or the pod may not use it.
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
		event(corev1.EventTypeWarning, reasonErrImageNeverPull, msg)
		return "", nil, &waitError{Reason: reasonErrImageNeverPull, Message: msg}
	}
	if present == nil && policy == corev1.PullNever {
		return neverPull()
	}
	// The credentials are looked up once, and only when needed (the
	// kubelet's makeLookupPullCredentialsFunc).
	lookup := sync.OnceValues(func() ([]credentialprovider.TrackedAuthConfig, error) {
		return credentialprovider.Credentials(image, secrets, p.node.ForPod(credentialprovider.Pod{
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ServiceAccountName: pod.Spec.ServiceAccountName}))
	})
	if present != nil {
		mustPull, err := p.records.MustAttemptImagePull(image, present.Id, func() ([]pullmanager.Secret, *pullmanager.ServiceAccount, error) {
			creds, err := lookup()
			if err != nil {
				return nil, nil, err
			}
			secrets, sa := podCredentialsOf(creds)
			return secrets, sa, nil
		})
		if err != nil {
			return "", nil, &waitError{Reason: reasonErrImagePull, Message: err.Error(), Retry: time.Second}
		}
		if !mustPull {
			event(corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image))
			return present.Id, present, nil
		}
		if policy == corev1.PullNever {
			return neverPull()
		}
	}
	creds, err := lookup()
	if err != nil {
		return "", nil, &waitError{Reason: reasonErrImagePull, Message: err.Error(), Retry: time.Second}
	}
	return p.pullImage(ctx, pod, spec, creds, sandbox, looked, event)
}

// pullsEnded is how many pulls have ended so far.
func (p *imagePuller) pullsEnded() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ends
}

// pullImage is the kubelet's imageManager.pullImage: a pull intent
// recorded first, then (unless backing off) the pull, and what pulled it
// recorded after.
func (p *imagePuller) pullImage(ctx context.Context, pod *corev1.Pod, spec *runtimeapi.ImageSpec,
	creds []credentialprovider.TrackedAuthConfig, sandbox *runtimeapi.PodSandboxConfig,
	looked uint64, event func(typ, reason, msg string)) (string, *runtimeapi.Image, *waitError) {
	image := spec.Image
	if err := p.records.RecordPullIntent(image); err != nil {
		return "", nil, &waitError{Reason: reasonErrImagePull, Retry: time.Second,
			Message: fmt.Sprintf("Failed to record image pull intent for container image %q: %v", image, err)}
	}
	var call *pullCall
	defer func() {
		if call != nil && call.err == nil {
			p.records.RecordImagePulled(image, call.ref, trackedToImagePullCreds(call.used))
		} else {
			p.records.RecordImagePullFailed(image)
		}
	}()
	key := string(pod.UID) + "_" + image
	if left, _ := p.backoff.Remaining(key); left > 0 {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		event(corev1.EventTypeNormal, "BackOff", msg)
		return "", nil, &waitError{Reason: reasonImagePullBackOff, Message: msg, Retry: left}
	}
	event(corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", image))
	call = p.pull(ctx, spec, creds, sandbox, looked)
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
	st, err := p.is.ImageStatus(ctx, spec, false)
	if err == nil && st.GetImage() != nil {
		return st.Image.Id, st.Image, nil
	}
	return call.ref, nil, nil
}

// podCredentialsOf are the pull secrets among creds and the service
// account a plugin gave credentials for, as the kubelet's
// getPodCredentials gives them to the pull manager (node-wide credentials
// are left out: the record's NodePodsAccessible covers them).
func podCredentialsOf(creds []credentialprovider.TrackedAuthConfig) ([]pullmanager.Secret, *pullmanager.ServiceAccount) {
	var out []pullmanager.Secret
	var sa *pullmanager.ServiceAccount
	for _, c := range creds {
		switch {
		case c.Source == nil:
		case c.Source.Secret != nil:
			s := c.Source.Secret
			out = append(out, pullmanager.Secret{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: c.AuthConfigHash})
		case c.Source.ServiceAccount != nil && sa == nil:
			s := c.Source.ServiceAccount
			sa = &pullmanager.ServiceAccount{UID: s.UID, Namespace: s.Namespace, Name: s.Name}
		}
	}
	return out, sa
}

// trackedToImagePullCreds is the kubelet's: a pull with no credential or a
// node-wide one is open to every pod of the node; a secret's, to pods with
// that secret (or its credential); a service account's token's, to pods of
// that service account.
func trackedToImagePullCreds(c *credentialprovider.TrackedAuthConfig) *pullmanager.Credentials {
	switch {
	case c == nil || c.Source == nil:
	case c.Source.Secret != nil:
		s := c.Source.Secret
		return &pullmanager.Credentials{KubernetesSecrets: []pullmanager.Secret{{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: c.AuthConfigHash}}}
	case c.Source.ServiceAccount != nil:
		s := c.Source.ServiceAccount
		return &pullmanager.Credentials{KubernetesServiceAccounts: []pullmanager.ServiceAccount{{UID: s.UID, Namespace: s.Namespace, Name: s.Name}}}
	}
	return &pullmanager.Credentials{NodePodsAccessible: true}
}

// pull pulls spec, joining a pull of the same image with the same
// credentials already in flight, or one that succeeded after the caller
// looked (pullsEnded gave looked), and trying each credential in turn
// (the kubelet's kubeGenericRuntimeManager.PullImage); none: an anonymous
// pull. The kubelet joins neither: containerd dedupes the transfer, but
// each pull still asks the registry for the manifest. Sharing a pull
// that ended after the caller looked is as if the caller had found it
// in flight: the caller's pull could not have begun any earlier.
func (p *imagePuller) pull(ctx context.Context, spec *runtimeapi.ImageSpec, creds []credentialprovider.TrackedAuthConfig, sandbox *runtimeapi.PodSandboxConfig, looked uint64) *pullCall {
	// Pods that pull with other credentials must not share a pull that
	// may fail (or succeed) for reasons of credentials.
	key := spec.Image
	for _, c := range creds {
		key += "\x00" + c.AuthConfigHash
		if c.Source != nil && c.Source.Secret != nil {
			key += ":" + c.Source.Secret.Namespace + "/" + c.Source.Secret.Name
		}
		if c.Source != nil && c.Source.ServiceAccount != nil {
			key += ":sa:" + c.Source.ServiceAccount.Namespace + "/" + c.Source.ServiceAccount.Name
		}
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
	if e, ok := p.ended[key]; ok && e.n > looked {
		p.mu.Unlock()
		return e
	}
	call := &pullCall{done: make(chan struct{})}
	p.inflight[key] = call
	p.mu.Unlock()

	defer func() {
		now := p.clock.Now()
		p.mu.Lock()
		delete(p.inflight, key)
		p.ends++
		call.n, call.endedAt = p.ends, now
		for k, e := range p.ended {
			if now.Sub(e.endedAt) > endedPullKept {
				delete(p.ended, k)
			}
		}
		if call.err == nil {
			p.ended[key] = call
		} else {
			delete(p.ended, key)
		}
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
	if len(creds) == 0 {
		call.ref, call.err = p.is.PullImage(ctx, spec, nil, sandbox)
	} else {
		var errs []error
		for i := range creds {
			c := &creds[i]
			// ServerAddress stays empty: the registry already matched, and
			// containerd 1.6 parses it as a URL (a bare host:port would
			// fail the pull).
			auth := &runtimeapi.AuthConfig{Username: c.Username, Password: c.Password, Auth: c.Auth,
				IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken}
			ref, err := p.is.PullImage(ctx, spec, auth, sandbox)
			if err == nil {
				call.ref, call.used, call.err = ref, c, nil
				break
			}
			errs = append(errs, err)
			call.err = utilerrors.NewAggregate(errs)
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
