package runtime

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/schemas"
)

// testRegistry is a registry on 127.0.0.1 (go-containerregistry's), with
// basic auth on repositories under private/, counting the pulls of each
// reference (one manifest request by tag per pull).
type testRegistry struct {
	host string
	img  v1.Image

	mu    sync.Mutex
	pulls map[string]int // "<repo>:<tag>" → manifest requests by tag
}

const regUser, regPassword = "puller", "s3cret"

func startRegistry(t *testing.T, h *harness) *testRegistry {
	t.Helper()
	var busybox images.Tarball
	for _, img := range h.ctrd.Images {
		if img.Ref == images.BusyboxImage {
			busybox = img
		}
	}
	img, err := tarball.ImageFromPath(busybox.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRegistry{img: img, pulls: map[string]int{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := req.URL.Path
		if strings.HasPrefix(p, "/v2/private/") {
			u, pw, ok := req.BasicAuth()
			if !ok || u != regUser || pw != regPassword {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if repo, ref, ok := strings.Cut(strings.TrimPrefix(p, "/v2/"), "/manifests/"); ok && !strings.HasPrefix(ref, "sha256:") &&
			req.Header.Get("X-Test-Push") == "" && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
			r.mu.Lock()
			r.pulls[repo+":"+ref]++
			r.mu.Unlock()
		}
		reg.ServeHTTP(w, req)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.host = ln.Addr().String()
	return r
}

// push stores the busybox image as repo:tag with the registry API
// (blob uploads, then the manifest).
func (r *testRegistry) push(t *testing.T, repoTag string) string {
	t.Helper()
	repo, tag, _ := strings.Cut(repoTag, ":")
	client := &http.Client{Transport: pushTransport{http.DefaultTransport}, Timeout: time.Minute}
	base := "http://" + r.host + "/v2/" + repo
	upload := func(digest v1.Hash, body io.Reader) {
		resp, err := client.Post(base+"/blobs/uploads/", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if !strings.HasPrefix(loc, "http") {
			loc = "http://" + r.host + loc
		}
		sep := "?"
		if strings.Contains(loc, "?") {
			sep = "&"
		}
		req, _ := http.NewRequest(http.MethodPut, loc+sep+"digest="+digest.String(), body)
		resp, err = client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload %s: %s", digest, resp.Status)
		}
	}
	layers, err := r.img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, _ := l.Digest()
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		upload(d, rc)
		rc.Close()
	}
	cfgName, _ := r.img.ConfigName()
	cfg, _ := r.img.RawConfigFile()
	upload(cfgName, bytes.NewReader(cfg))
	manifest, _ := r.img.RawManifest()
	mt, _ := r.img.MediaType()
	req, _ := http.NewRequest(http.MethodPut, base+"/manifests/"+tag, bytes.NewReader(manifest))
	req.Header.Set("Content-Type", string(mt))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push manifest %s: %s", repoTag, resp.Status)
	}
	return r.host + "/" + repoTag
}

func (r *testRegistry) pullsOf(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulls[repo]
}

// pushTransport marks the test's own requests so they are not counted.
type pushTransport struct{ rt http.RoundTripper }

func (p pushTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Test-Push", "1")
	req.SetBasicAuth(regUser, regPassword)
	return p.rt.RoundTrip(req)
}

func imagePod(name, image string, policy corev1.PullPolicy, script string) *corev1.Pod {
	c := busybox("app", script)
	c.Image, c.ImagePullPolicy = image, policy
	pod := newPod(name, c)
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	return pod
}

func waitingReason(o *schemas.PodObserved, name string) string {
	if c := container(o, name); c != nil && c.State.Waiting != nil {
		return c.State.Waiting.Reason
	}
	return ""
}

// Pull policies against a registry on 127.0.0.1.
func TestImagePullPolicies(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	reg := startRegistry(t, h)

	t.Run("IfNotPresent pulls once", func(t *testing.T) {
		img := reg.push(t, "test/ifnp:1")
		for i := range 2 {
			pod := imagePod(fmt.Sprintf("ifnp-%d", i), img, corev1.PullIfNotPresent, "exec sleep 3600")
			h.run(pod)
			h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
			h.remove(pod)
		}
		if n := reg.pullsOf("test/ifnp:1"); n != 1 {
			t.Fatalf("%d pulls, want 1", n)
		}
	})

	t.Run("Always pulls on every start", func(t *testing.T) {
		img := reg.push(t, "test/always:1")
		pod := imagePod("always", img, corev1.PullAlways, "sleep 1; exit 0")
		h.run(pod)
		o := h.waitObserved(pod, 2*time.Minute, "restarted", func(o *schemas.PodObserved) bool {
			return container(o, "app").RestartCount >= 1 && running(o, "app")
		})
		starts := int(container(o, "app").RestartCount) + 1
		if n := reg.pullsOf("test/always:1"); n < starts {
			t.Fatalf("%d pulls for %d starts", n, starts)
		}
		h.remove(pod)
	})

	t.Run("Never with a missing image", func(t *testing.T) {
		pod := imagePod("never", reg.host+"/test/absent:1", corev1.PullNever, "true")
		h.run(pod)
		o := h.waitObserved(pod, time.Minute, "ErrImageNeverPull", func(o *schemas.PodObserved) bool {
			return waitingReason(o, "app") == reasonErrImageNeverPull
		})
		if !strings.Contains(container(o, "app").State.Waiting.Message, "is not present with pull policy of Never") {
			t.Fatalf("message: %s", describe(o))
		}
		if reg.pullsOf("test/absent:1") != 0 {
			t.Fatal("Never went to the registry")
		}
		h.events.await(t, pod.UID, reasonErrImageNeverPull, 1)
		h.remove(pod)
	})

	t.Run("nonexistent image backs off", func(t *testing.T) {
		pod := imagePod("nonexistent", reg.host+"/test/nonexistent:1", corev1.PullIfNotPresent, "true")
		h.run(pod)
		h.waitSeen(pod, time.Minute, "ErrImagePull", func(o *schemas.PodObserved) bool {
			return waitingReason(o, "app") == reasonErrImagePull
		})
		h.waitObserved(pod, time.Minute, "ImagePullBackOff", func(o *schemas.PodObserved) bool {
			return waitingReason(o, "app") == reasonImagePullBackOff
		})
		if n := reg.pullsOf("test/nonexistent:1"); n != 1 {
			t.Fatalf("%d pulls during the first back-off, want 1", n)
		}
		h.remove(pod)
	})

	t.Run("five pods one pull", func(t *testing.T) {
		img := reg.push(t, "test/shared:1")
		var pods []*corev1.Pod
		for i := range 5 {
			pod := imagePod(fmt.Sprintf("shared-%d", i), img, corev1.PullIfNotPresent, "exec sleep 3600")
			pods = append(pods, pod)
			h.run(pod)
		}
		for _, pod := range pods {
			h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
		}
		if n := reg.pullsOf("test/shared:1"); n != 1 {
			t.Fatalf("%d pulls for 5 pods, want 1", n)
		}
		for _, pod := range pods {
			h.remove(pod)
		}
	})
}

// A private image pulls with the pod's imagePullSecret (basic auth), and
// not without it.
func TestImagePullSecret(t *testing.T) {
	var reg *testRegistry
	secrets := StaticObjects{Secrets: map[string]*corev1.Secret{}}
	h := newHarness(t, harnessOptions{noStart: true})
	reg = startRegistry(t, h)
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.host: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(regUser + ":" + regPassword)),
	}}})
	secrets.Secrets["default/regcred"] = &corev1.Secret{
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	h.start(func(o *Options) { o.Objects = secrets })
	img := reg.push(t, "private/busybox:1")

	without := imagePod("nosecret", img, corev1.PullIfNotPresent, "exec sleep 3600")
	h.run(without)
	o := h.waitSeen(without, time.Minute, "ErrImagePull", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonErrImagePull
	})
	t.Logf("without the secret: %s", container(o, "app").State.Waiting.Message)

	with := imagePod("withsecret", img, corev1.PullIfNotPresent, "exec sleep 3600")
	with.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	h.run(with)
	h.waitObserved(with, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
}

// With an API server, the pull secret is read through it with the node's
// identity (the Node authorizer lets the node read the secrets of its own
// pods).
func TestImagePullSecretThroughAPI(t *testing.T) {
	cp := sharedControlPlane(t)
	h := newHarness(t, harnessOptions{noStart: true})
	reg := startRegistry(t, h)
	img := reg.push(t, "private/busybox:api")

	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ctx := h.ctx
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.host: map[string]string{
		"username": regUser, "password": regPassword,
	}}})
	secret := &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
	secret.Name, secret.Namespace = "regcred", ns
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := imagePod("apisecret", img, corev1.PullIfNotPresent, "exec sleep 3600")
	pod.Namespace, pod.UID = ns, ""
	pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	// The service account token volume comes with the volumes issue.
	no := false
	pod.Spec.AutomountServiceAccountToken = &no
	created, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.start(func(o *Options) { o.Objects = NewAPIObjectsFor(cp.NodeClient(t), "node-1") })
	h.run(created)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := reg.pullsOf("private/busybox:api"); n == 0 {
		t.Fatal("the registry saw no pull")
	}
}
