package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crilogs "k8s.io/cri-client/pkg/logs"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// errBadQuery and errInvalidQuery are the kubelet's getContainerLogs
// answers to a query that does not decode (400) or does not validate (422).
var (
	errBadQuery     = errors.New(`{"message": "Unable to decode query."}`)
	errInvalidQuery = errors.New(`{"message": "Invalid request."}`)
)

// parseLogOptions decodes the query of /containerLogs into v1.PodLogOptions
// as the kubelet's getContainerLogs does (ParameterCodec.DecodeParameters,
// the legacy "tail" parameter, then ValidatePodLogOptions).
func parseLogOptions(q url.Values) (*corev1.PodLogOptions, error) {
	// backwards compatibility for the "tail" query parameter
	if tail := q.Get("tail"); tail != "" {
		q["tailLines"] = []string{tail}
		// "all" is the same as omitting tail
		if tail == "all" {
			delete(q, "tailLines")
		}
	}
	o := &corev1.PodLogOptions{}
	last := func(k string) (string, bool) {
		v, ok := q[k]
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	boolean := func(k string, dst *bool) error {
		if v, ok := last(k); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errBadQuery
			}
			*dst = b
		}
		return nil
	}
	integer := func(k string) (*int64, error) {
		v, ok := last(k)
		if !ok {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, errBadQuery
		}
		return &n, nil
	}
	for _, b := range []struct {
		k   string
		dst *bool
	}{{"follow", &o.Follow}, {"previous", &o.Previous}, {"timestamps", &o.Timestamps},
		{"insecureSkipTLSVerifyBackend", &o.InsecureSkipTLSVerifyBackend}} {
		if err := boolean(b.k, b.dst); err != nil {
			return nil, err
		}
	}
	var err error
	if o.TailLines, err = integer("tailLines"); err != nil {
		return nil, err
	}
	if o.LimitBytes, err = integer("limitBytes"); err != nil {
		return nil, err
	}
	if o.SinceSeconds, err = integer("sinceSeconds"); err != nil {
		return nil, err
	}
	if v, ok := last("sinceTime"); ok {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, errBadQuery
		}
		mt := metav1.NewTime(t)
		o.SinceTime = &mt
	}
	if v, ok := last("stream"); ok {
		st := v
		o.Stream = &st
	}
	// ValidatePodLogOptions (pkg/apis/core/validation).
	switch {
	case o.TailLines != nil && *o.TailLines < 0,
		o.LimitBytes != nil && *o.LimitBytes < 1,
		o.SinceSeconds != nil && *o.SinceSeconds < 1,
		o.SinceSeconds != nil && o.SinceTime != nil,
		o.Stream != nil && o.TailLines != nil && *o.Stream != corev1.LogStreamAll:
		return nil, errInvalidQuery
	}
	return o, nil
}

// criLogOptions is the kubelet's kuberuntime logs.NewLogOptions: the API's
// options as cri-client's, sinceSeconds taken from now.
func criLogOptions(o *corev1.PodLogOptions, now time.Time) *crilogs.LogOptions {
	out := &crilogs.LogOptions{TailLines: o.TailLines, LimitBytes: o.LimitBytes, Follow: o.Follow, Timestamp: o.Timestamps}
	if o.SinceSeconds != nil {
		out.Since = now.Add(-time.Duration(*o.SinceSeconds) * time.Second)
	}
	if o.SinceTime != nil && o.SinceTime.After(out.Since) {
		out.Since = o.SinceTime.Time
	}
	return out
}

// containerLogs serves /containerLogs/ as the kubelet's server does
// (pkg/kubelet/server/server.go getContainerLogs, and the kubelet's
// GetContainerLogs and validateContainerLogStatus).
type containerLogs struct {
	log  *slog.Logger
	pods podFinder
	// rt is all of CRI's runtime service: cri-client's ReadLogs takes it.
	rt internalapi.RuntimeService
}

// serveContainerLogs is the kubelet's getContainerLogs: the container's CRI
// log file read with cri-client's ReadLogs (the kubelet's own reader: the
// CRI log format, partial lines joined, tail, since, limit, follow across
// rotation until the container stops).
func (s *containerLogs) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	podID, containerName := r.PathValue("podID"), r.PathValue("containerName")
	opts, err := parseLogOptions(r.URL.Query())
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, errInvalidQuery) {
			code = http.StatusUnprocessableEntity
		}
		writeErrorString(w, code, err.Error())
		return
	}
	stdout, stderr := io.Writer(nil), io.Writer(nil)
	fw := &flushWriter{w: w}
	switch {
	case opts.Stream == nil || *opts.Stream == corev1.LogStreamAll:
		stdout, stderr = fw, fw
	case *opts.Stream == corev1.LogStreamStdout:
		stdout = fw
	case *opts.Stream == corev1.LogStreamStderr:
		stderr = fw
	default:
		writeErrorString(w, http.StatusBadRequest, fmt.Sprintf("invalid stream type %q", *opts.Stream))
		return
	}
	pod, ok := s.pods.get(r.Context(), r.PathValue("podNamespace"), podID)
	if !ok {
		writeErrorString(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist", podID))
		return
	}
	if !containerSpec(pod, containerName) {
		writeErrorString(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q", containerName, podID))
		return
	}
	c, err := s.logContainer(r.Context(), pod, containerName, opts.Previous)
	if err != nil {
		writeErrorString(w, http.StatusBadRequest, err.Error())
		return
	}
	st, err := s.rt.ContainerStatus(r.Context(), c.Id, false)
	if err != nil || st.GetStatus() == nil {
		writeErrorString(w, http.StatusBadRequest, fmt.Sprintf("unable to retrieve container logs for containerd://%s", c.Id))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Transfer-Encoding", "chunked")
	if err := crilogs.ReadLogs(r.Context(), st.GetStatus().GetLogPath(), c.Id, criLogOptions(opts, time.Now()), s.rt, stdout, stderr); err != nil {
		if fw.wrote {
			s.log.Debug("Log stream ended", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "containerName", containerName, "err", err)
			return
		}
		writeErrorString(w, http.StatusBadRequest, err.Error())
		return
	}
	if !fw.wrote {
		w.WriteHeader(http.StatusOK)
	}
}

// logContainer picks the container whose log is read, as the kubelet's
// validateContainerLogStatus does from the pod status: the newest attempt,
// or with previous the one before it. The error texts are the kubelet's.
func (s *containerLogs) logContainer(ctx context.Context, pod *corev1.Pod, name string, previous bool) (*runtimeapi.Container, error) {
	resp, err := s.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
		kubelettypes.KubernetesPodUIDLabel:        string(pod.UID),
		kubelettypes.KubernetesContainerNameLabel: name,
	}})
	if err != nil {
		return nil, fmt.Errorf("container %q in pod %q is not available: %v", name, pod.Name, err)
	}
	sort.Slice(resp, func(i, j int) bool {
		ai, aj := resp[i].GetMetadata().GetAttempt(), resp[j].GetMetadata().GetAttempt()
		if ai != aj {
			return ai > aj
		}
		return resp[i].CreatedAt > resp[j].CreatedAt
	})
	if previous {
		for _, c := range resp[min(1, len(resp)):] {
			if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				return c, nil
			}
		}
		return nil, fmt.Errorf("previous terminated container %q in pod %q not found", name, pod.Name)
	}
	if len(resp) == 0 {
		return nil, fmt.Errorf("container %q in pod %q is waiting to start: ContainerCreating", name, pod.Name)
	}
	return resp[0], nil
}

// flushWriter flushes after every write, so followed logs arrive as they
// are written (the kubelet's flushwriter).
type flushWriter struct {
	w     http.ResponseWriter
	wrote bool
}

func (f *flushWriter) Write(p []byte) (int, error) {
	f.wrote = true
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}
