package volumes

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// The kubelet's podcertificate figures: a request not seen for 10 minutes
// (plus up to 5 of jitter) is taken as deleted; a refresh 10 minutes past
// beginRefreshAt is overdue; every projection is looked at again every
// 1–2 minutes.
const (
	assumeDeletedThreshold = 10 * time.Minute
	refreshOverdueDuration = 10 * time.Minute
	podCertRefreshPeriod   = time.Minute
)

// projectionKey names one podCertificate source of a pod's volume.
type projectionKey struct {
	Namespace   string
	PodName     string
	PodUID      string
	VolumeName  string
	SourceIndex int
}

// credState is where a projection is in the kubelet's state machine:
//
//	initial ─► wait ─► fresh ─► waitRefresh ─► fresh …
//	            └─► denied / failed ◄─┘
type credState int

const (
	credInitial credState = iota
	credWait
	credDenied
	credFailed
	credFresh
	credWaitRefresh
)

// projectionRecord is one projection's credentials: the issued key and
// chain (fresh, waitRefresh), the request under way (wait, waitRefresh)
// and why it ended (denied, failed).
type projectionRecord struct {
	mu    sync.Mutex
	state credState

	key, chain               []byte
	beginRefreshAt, notAfter time.Time
	overdueEmitted           bool
	expiredEmitted           bool

	pendingKey []byte
	pcrName    string
	abandonAt  time.Time

	reason, message string
}

// bundle is the kubelet's getCredBundle of each state.
func (r *projectionRecord) bundle() ([]byte, []byte, error) {
	switch r.state {
	case credFresh, credWaitRefresh:
		return r.key, r.chain, nil
	case credDenied:
		return nil, nil, fmt.Errorf("PodCertificateRequest was permanently denied: reason=%q message=%q", r.reason, r.message)
	case credFailed:
		return nil, nil, fmt.Errorf("PodCertificateRequest was permanently failed: reason=%q message=%q", r.reason, r.message)
	}
	return nil, nil, errors.New("credential bundle is not issued yet")
}

// podCertificates is the kubelet's podcertificate.IssuingManager: each
// podCertificate source of each pod on the node gets a private key made
// here and a PodCertificateRequest for it (signer, key type, maximum
// lifetime and user annotations from the projection; the pod, its service
// account and the node by name and UID, which NodeRestriction checks);
// once the signer sets Issued the key and chain are the projection's
// files, and from beginRefreshAt (plus up to 5 minutes of jitter) a new
// key and request replace them. Denied and Failed are final for the pod.
// State lives in memory only: after a restart every projection is
// requested again, as on a kubelet. The requests are watched (spec.nodeName
// = the node, what the Node authorizer allows) from the first pod that
// has such a projection.
type podCertificates struct {
	client   kubernetes.Interface
	nodeName string
	clock    clock.WithTicker
	log      *slog.Logger
	// event posts an event about a pod; issued is told when a
	// projection's credentials changed.
	event  func(pod *corev1.Pod, eventType, reason, message string)
	issued func(uid types.UID)

	queue   workqueue.TypedRateLimitingInterface[projectionKey]
	started chan struct{}
	once    sync.Once
	lister  certlisters.PodCertificateRequestLister
	synced  cache.InformerSynced

	mu    sync.Mutex
	pods  map[types.UID]*corev1.Pod
	store map[projectionKey]*projectionRecord
}

func newPodCertificates(client kubernetes.Interface, nodeName string, clk clock.WithTicker, log *slog.Logger) *podCertificates {
	return &podCertificates{
		client: client, nodeName: nodeName, clock: clk, log: log,
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[projectionKey]()),
		started: make(chan struct{}),
		pods:    map[types.UID]*corev1.Pod{}, store: map[projectionKey]*projectionRecord{},
	}
}

// hasPodCertificates: some projected volume of the pod has a
// podCertificate source.
func hasPodCertificates(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.PodCertificate != nil {
					return true
				}
			}
		}
	}
	return false
}

// track is the kubelet's TrackPod: the pod's projections are queued the
// first time it is seen (the first Setup), and the watch is started.
func (c *podCertificates) track(pod *corev1.Pod) {
	if !hasPodCertificates(pod) {
		return
	}
	c.mu.Lock()
	_, known := c.pods[pod.UID]
	c.pods[pod.UID] = pod
	c.mu.Unlock()
	c.once.Do(func() { close(c.started) })
	if !known {
		c.queuePod(pod.UID)
	}
}

// forgetPod is the kubelet's ForgetPod: the pod's credentials are dropped.
func (c *podCertificates) forgetPod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
	for k := range c.store {
		if k.PodUID == string(uid) {
			delete(c.store, k)
		}
	}
}

func (c *podCertificates) pod(uid types.UID) (*corev1.Pod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pods[uid]
	return p, ok
}

// queuePod is the kubelet's queueAllProjectionsForPod.
func (c *podCertificates) queuePod(uid types.UID) {
	pod, ok := c.pod(uid)
	if !ok {
		return
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for i, s := range v.Projected.Sources {
			if s.PodCertificate != nil {
				c.queue.Add(projectionKey{Namespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), VolumeName: v.Name, SourceIndex: i})
			}
		}
	}
}

// run is the kubelet's Run, from the first tracked pod on: the watch of
// the node's requests, the refresh pass and the queue's worker.
func (c *podCertificates) run(ctx context.Context) {
	defer c.queue.ShutDown()
	select {
	case <-ctx.Done():
		return
	case <-c.started:
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", c.nodeName).String()
	}))
	pcrs := factory.Certificates().V1().PodCertificateRequests()
	requeue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if pcr, ok := obj.(*certificatesv1.PodCertificateRequest); ok {
			c.queuePod(pcr.Spec.PodUID)
		}
	}
	if _, err := pcrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: requeue, UpdateFunc: func(_, o any) { requeue(o) }, DeleteFunc: requeue,
	}); err != nil {
		c.log.Error("Cannot watch PodCertificateRequests", "err", err)
		return
	}
	c.lister, c.synced = pcrs.Lister(), pcrs.Informer().HasSynced
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	c.log.Info("Pod certificate manager starting up")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return
	}
	go c.refreshLoop(ctx)
	go func() {
		for c.processNext(ctx) {
		}
	}()
	<-ctx.Done()
}

// refreshLoop is the kubelet's runRefreshPass every 1–2 minutes
// (JitterUntil with factor 1.0).
func (c *podCertificates) refreshLoop(ctx context.Context) {
	for {
		t := c.clock.NewTimer(podCertRefreshPeriod + time.Duration(mathrand.Int64N(int64(podCertRefreshPeriod))))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		c.mu.Lock()
		uids := make([]types.UID, 0, len(c.pods))
		for uid := range c.pods {
			uids = append(uids, uid)
		}
		c.mu.Unlock()
		for _, uid := range uids {
			c.queuePod(uid)
		}
	}
}

func (c *podCertificates) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.handle(ctx, key); err != nil {
		c.log.Warn("Cannot handle podCertificate projected volume source", "namespace", key.Namespace, "pod", key.PodName,
			"volume", key.VolumeName, "sourceIndex", key.SourceIndex, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// handle is the kubelet's handleProjection: one step of the projection's
// state machine. nil drops the key from the queue (a request's change
// queues it again).
func (c *podCertificates) handle(ctx context.Context, key projectionKey) error {
	pod, ok := c.pod(types.UID(key.PodUID))
	if !ok {
		return nil
	}
	var src *corev1.PodCertificateProjection
	for _, v := range pod.Spec.Volumes {
		if v.Name == key.VolumeName && v.Projected != nil && key.SourceIndex < len(v.Projected.Sources) {
			src = v.Projected.Sources[key.SourceIndex].PodCertificate
		}
	}
	if src == nil {
		return nil
	}
	c.mu.Lock()
	rec := c.store[key]
	if rec == nil {
		rec = &projectionRecord{}
		c.store[key] = rec
	}
	c.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()

	switch rec.state {
	case credInitial, credFresh:
		if rec.state == credFresh {
			if c.clock.Now().Before(rec.beginRefreshAt) {
				return nil
			}
			c.overdue(pod, rec)
		}
		privKey, pcr, err := c.request(ctx, pod, src)
		if err != nil {
			if rec.state == credFresh {
				return fmt.Errorf("while creating refresh PodCertificateRequest: %w", err)
			}
			return fmt.Errorf("while creating initial PodCertificateRequest: %w", err)
		}
		rec.pendingKey, rec.pcrName = privKey, pcr.Name
		rec.abandonAt = pcr.CreationTimestamp.Add(assumeDeletedThreshold + jitter())
		if rec.state == credInitial {
			rec.state = credWait
		} else {
			rec.state = credWaitRefresh
		}
		return nil
	case credWait, credWaitRefresh:
		pcr, err := c.lister.PodCertificateRequests(key.Namespace).Get(rec.pcrName)
		if apierrors.IsNotFound(err) && c.clock.Now().After(rec.abandonAt) {
			// Informer lag or a deleted request: after 10 minutes the
			// latter; ask again.
			if rec.state == credWait {
				rec.state = credInitial
				return fmt.Errorf("PodCertificateRequest %q appears to have been deleted", key.Namespace+"/"+rec.pcrName)
			}
			rec.state = credFresh
			return errors.New("PodCertificateRequest appears to have been deleted")
		} else if err != nil {
			return fmt.Errorf("while getting PodCertificateRequest %q: %w", key.Namespace+"/"+rec.pcrName, err)
		}
		if c.settle(pod, rec, pcr) {
			return nil
		}
		if rec.state == credWaitRefresh {
			c.overdue(pod, rec)
		}
	}
	return nil
}

// settle moves rec on once its request reached a final condition; false
// while it is pending.
func (c *podCertificates) settle(pod *corev1.Pod, rec *projectionRecord, pcr *certificatesv1.PodCertificateRequest) bool {
	name := pcr.Namespace + "/" + pcr.Name
	for _, cond := range pcr.Status.Conditions {
		switch cond.Type {
		case certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed:
			// The kubelet's event: reason Denied or Failed. (Its
			// Eventf call passes cond.Reason as the format and this
			// text as an extra argument; nodelet posts the text.)
			what := "was denied"
			rec.state = credDenied
			if cond.Type == certificatesv1.PodCertificateRequestConditionTypeFailed {
				what, rec.state = "failed", credFailed
			}
			rec.reason, rec.message = cond.Reason, cond.Message
			rec.key, rec.chain, rec.pendingKey = nil, nil, nil
			c.emit(pod, corev1.EventTypeWarning, cond.Type,
				fmt.Sprintf("PodCertificateRequest %s %s, reason=%q, message=%q", name, what, cond.Reason, cond.Message))
			c.notify(pod.UID)
			return true
		case certificatesv1.PodCertificateRequestConditionTypeIssued:
			rec.key, rec.pendingKey = rec.pendingKey, nil
			rec.chain = cleanCertificateChain([]byte(pcr.Status.CertificateChain))
			if pcr.Status.BeginRefreshAt != nil {
				rec.beginRefreshAt = pcr.Status.BeginRefreshAt.Add(jitter())
			}
			if pcr.Status.NotAfter != nil {
				rec.notAfter = pcr.Status.NotAfter.Time
			}
			rec.overdueEmitted, rec.expiredEmitted = false, false
			rec.state = credFresh
			c.notify(pod.UID)
			return true
		}
	}
	return false
}

// overdue posts the kubelet's warnings, once each, for a refresh 10
// minutes late and for credentials past notAfter.
func (c *podCertificates) overdue(pod *corev1.Pod, rec *projectionRecord) {
	now := c.clock.Now()
	if now.After(rec.beginRefreshAt.Add(refreshOverdueDuration)) && !rec.overdueEmitted {
		c.emit(pod, corev1.EventTypeWarning, "CertificateOverdueForRefresh", "PodCertificate refresh overdue")
		rec.overdueEmitted = true
	}
	if now.After(rec.notAfter) && !rec.expiredEmitted {
		c.emit(pod, corev1.EventTypeWarning, "CertificateExpired", "PodCertificate expired")
		rec.expiredEmitted = true
	}
}

func (c *podCertificates) emit(pod *corev1.Pod, typ, reason, msg string) {
	if c.event != nil {
		c.event(pod, typ, reason, msg)
	}
}

func (c *podCertificates) notify(uid types.UID) {
	if c.issued != nil {
		c.issued(uid)
	}
}

// request is the kubelet's createPodCertificateRequest: a new key, its
// proof of possession (a stub PKCS#10 request), and the request naming
// the pod, its service account and the node by UID.
func (c *podCertificates) request(ctx context.Context, pod *corev1.Pod, src *corev1.PodCertificateProjection) ([]byte, *certificatesv1.PodCertificateRequest, error) {
	sa, err := c.client.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, pod.Spec.ServiceAccountName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("while fetching service account: %w", err)
	}
	node, err := c.client.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("while getting node object: %w", err)
	}
	priv, proof, err := generateKeyAndProof(src.KeyType)
	if err != nil {
		return nil, nil, fmt.Errorf("while generating keypair: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("while PEM-encoding private key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	req := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, GenerateName: "req-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: src.SignerName,
			PodName:    pod.Name, PodUID: pod.UID,
			ServiceAccountName: pod.Spec.ServiceAccountName, ServiceAccountUID: sa.UID,
			NodeName: types.NodeName(c.nodeName), NodeUID: node.UID,
			MaxExpirationSeconds:      src.MaxExpirationSeconds,
			StubPKCS10Request:         proof,
			UnverifiedUserAnnotations: src.UserAnnotations,
		},
	}
	req, err = c.client.CertificatesV1().PodCertificateRequests(pod.Namespace).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("while creating on API: %w", err)
	}
	return keyPEM, req, nil
}

// bundle is the kubelet's GetPodCertificateCredentialBundle: the key and
// chain of the projection, or why there are none.
func (c *podCertificates) bundle(pod *corev1.Pod, volume string, index int) ([]byte, []byte, error) {
	key := projectionKey{Namespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID), VolumeName: volume, SourceIndex: index}
	c.mu.Lock()
	rec := c.store[key]
	c.mu.Unlock()
	if rec == nil {
		return nil, nil, fmt.Errorf("no credentials yet for key=%v", key)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.bundle()
}

// jitter is up to 5 minutes, so that projections do not request together.
func jitter() time.Duration { return time.Duration(mathrand.Int64N(int64(5 * time.Minute))) }

// generateKeyAndProof is the kubelet's: the key types the API allows.
func generateKeyAndProof(keyType string) (crypto.PrivateKey, []byte, error) {
	var priv crypto.PrivateKey
	var err error
	switch keyType {
	case "RSA3072":
		priv, err = rsa.GenerateKey(rand.Reader, 3072)
	case "RSA4096":
		priv, err = rsa.GenerateKey(rand.Reader, 4096)
	case "ECDSAP256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ECDSAP384":
		priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ECDSAP521":
		priv, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "ED25519":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, nil, fmt.Errorf("unknown key type %q", keyType)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("while generating %s key: %w", keyType, err)
	}
	proof, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, priv)
	if err != nil {
		return nil, nil, fmt.Errorf("while generating stub PKCS#10 request: %w", err)
	}
	return priv, proof, nil
}

// cleanCertificateChain is the kubelet's: only the CERTIFICATE blocks'
// bytes, without headers or text between them.
func cleanCertificateChain(in []byte) []byte {
	var out bytes.Buffer
	for rest := in; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out.Bytes()
		}
		out.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes}))
	}
}
