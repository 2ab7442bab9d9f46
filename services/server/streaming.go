package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// streamer serves exec, attach, port-forward and run as the kubelet's
// server does with its streaming runtime (pkg/kubelet/server/server.go
// getExec, getAttach, getPortForward, getRun, proxyStream): CRI gives a
// streaming URL and the stream is proxied to the runtime's streaming server.
type streamer struct {
	log  *slog.Logger
	pods podFinder
	rt   streamingRuntime
}

// podFinder is the kubelet's GetPodByName: a desired pod by namespace and
// name, once the desired pods are known.
type podFinder interface {
	get(ctx context.Context, namespace, name string) (*corev1.Pod, bool)
}

// streamingRuntime is the part of CRI the streams use.
type streamingRuntime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout []byte, stderr []byte, err error)
}

var (
	_ podFinder        = (*podIndex)(nil)
	_ streamingRuntime = (internalapi.RuntimeService)(nil)
)

// responder is the kubelet's: a proxy error is a 500 with its text.
type responder struct{ log *slog.Logger }

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	r.log.Error("Error while proxying request", "path", req.URL.Path, "err", err)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// streamPod finds the request's pod for exec, attach, run and
// port-forward; the 404 text is the kubelet's.
func (s *streamer) streamPod(w http.ResponseWriter, r *http.Request) (*corev1.Pod, bool) {
	pod, ok := s.pods.get(r.Context(), r.PathValue("podNamespace"), r.PathValue("podID"))
	if !ok {
		writeErrorString(w, http.StatusNotFound, "pod does not exist")
		return nil, false
	}
	return pod, true
}

// runningContainer is the kubelet's findContainer: the newest running
// instance of the pod's container.
func (s *streamer) runningContainer(ctx context.Context, pod *corev1.Pod, name string) (string, error) {
	resp, err := s.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			kubelettypes.KubernetesPodUIDLabel:        string(pod.UID),
			kubelettypes.KubernetesContainerNameLabel: name,
		}})
	if err != nil {
		return "", err
	}
	var best *runtimeapi.Container
	for _, c := range resp {
		if best == nil || c.GetMetadata().GetAttempt() > best.GetMetadata().GetAttempt() {
			best = c
		}
	}
	if best == nil {
		return "", fmt.Errorf("container not found (%q)", name)
	}
	return best.Id, nil
}

// proxyStream is the kubelet's getExec/getAttach tail: proxy the upgraded
// connection to the runtime's streaming URL with UpgradeAwareHandler, and
// for kubectl's WebSocket (v5.channel.k8s.io) translate it to SPDY towards
// the runtime with the StreamTranslatorHandler.
func (s *streamer) proxyStream(w http.ResponseWriter, r *http.Request, u *url.URL, opts *remotecommandserver.Options) {
	var h http.Handler = proxy.NewUpgradeAwareHandler(u, nil /*transport*/, false /*wrapTransport*/, true /*upgradeRequired*/, responder{s.log})
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		h = translator.NewStreamTranslatorHandler(u, nil, 0, translator.Options{
			Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
		})
	}
	h.ServeHTTP(w, r)
}

// serveExec is the kubelet's getExec: CRI Exec gives a streaming URL.
func (s *streamer) serveExec(w http.ResponseWriter, r *http.Request) {
	s.serveRemoteCommand(w, r, "Exec", func(ctx context.Context, id string, o *remotecommandserver.Options) (string, error) {
		resp, err := s.rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id,
			Cmd: r.URL.Query()[corev1.ExecCommandParam], Tty: o.TTY, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr})
		return resp.GetUrl(), err
	})
}

// serveAttach is the kubelet's getAttach: CRI Attach gives a streaming URL.
func (s *streamer) serveAttach(w http.ResponseWriter, r *http.Request) {
	s.serveRemoteCommand(w, r, "Attach", func(ctx context.Context, id string, o *remotecommandserver.Options) (string, error) {
		resp, err := s.rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id,
			Tty: o.TTY, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr})
		return resp.GetUrl(), err
	})
}

// serveRemoteCommand is what exec and attach share: the options from the
// request, the pod's running container, the streaming URL CRI gives for it
// (streamURL), and the proxied stream.
func (s *streamer) serveRemoteCommand(w http.ResponseWriter, r *http.Request, what string,
	streamURL func(ctx context.Context, containerID string, o *remotecommandserver.Options) (string, error)) {
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		writeErrorString(w, http.StatusBadRequest, err.Error())
		return
	}
	pod, ok := s.streamPod(w, r)
	if !ok {
		return
	}
	id, err := s.runningContainer(r.Context(), pod, r.PathValue("containerName"))
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	raw, err := streamURL(r.Context(), id, opts)
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	s.log.Debug(what, "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "containerName", r.PathValue("containerName"))
	s.proxyStream(w, r, u, opts)
}

// servePortForward is the kubelet's getPortForward: CRI PortForward on the
// pod's sandbox; kubectl's WebSocket tunnel (SPDY over WebSocket) is
// unwrapped by the TunnelingHandler.
func (s *streamer) servePortForward(w http.ResponseWriter, r *http.Request) {
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			writeErrorString(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	pod, ok := s.streamPod(w, r)
	if !ok {
		return
	}
	if uid := r.PathValue("uid"); uid != "" && string(pod.UID) != uid {
		writeErrorString(w, http.StatusNotFound, "pod not found")
		return
	}
	sbs, err := s.rt.ListPodSandbox(r.Context(), &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{kubelettypes.KubernetesPodUIDLabel: string(pod.UID)},
	})
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	if len(sbs) == 0 {
		_ = streaming.WriteError(fmt.Errorf("pod %s/%s has no running sandbox", pod.Namespace, pod.Name), w)
		return
	}
	resp, err := s.rt.PortForward(r.Context(), &runtimeapi.PortForwardRequest{PodSandboxId: sbs[0].Id, Port: opts.Ports})
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		_ = streaming.WriteError(err, w)
		return
	}
	var h http.Handler = proxy.NewUpgradeAwareHandler(u, nil, false, true, responder{s.log})
	if tunnel {
		h = translator.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

// serveRun is the kubelet's getRun: ExecSync of the space-separated cmd
// query parameter, stdout and stderr together in the answer.
func (s *streamer) serveRun(w http.ResponseWriter, r *http.Request) {
	pod, ok := s.streamPod(w, r)
	if !ok {
		return
	}
	id, err := s.runningContainer(r.Context(), pod, r.PathValue("containerName"))
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	// For legacy reasons, run uses different query param than exec.
	cmd := strings.Split(r.URL.Query().Get("cmd"), " ")
	stdout, stderr, err := s.rt.ExecSync(r.Context(), id, cmd, 0)
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := append(stdout, stderr...)
	if len(out) == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
