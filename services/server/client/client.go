// Package client is the node-local admin's client of nodelet-server: what
// `nodelet logs` and `nodelet exec` use. It is apart from the server so that
// the CLI does not link the server (and cAdvisor).
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeclient"
)

// Files are the node-local CA and the local admin's client
// certificate and key under the state dir.
type Files struct{ CA, Cert, Key string }

// LocalFiles names the node-local client files of stateDir.
func LocalFiles(stateDir string) Files {
	d := kubeclient.CertDir(stateDir)
	return Files{CA: filepath.Join(d, "local-ca.crt"), Cert: filepath.Join(d, "local-admin.crt"), Key: filepath.Join(d, "local-admin.key")}
}

// LocalURL is where the node's own kubelet API answers: server.address,
// or loopback when it listens on every address.
func LocalURL(cfg *config.Config) string {
	host := cfg.Server.Address
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return fmt.Sprintf("https://%s", net.JoinHostPort(host, strconv.Itoa(cfg.Server.Port)))
}

// Client talks to the node's own kubelet API as the node-local admin: what
// `nodelet logs` and `nodelet exec` use.
type Client struct {
	base string
	rest *rest.Config
	http *http.Client
}

// New reads the node-local client certificate under the state
// dir (made by nodelet-server at its first start).
func New(cfg *config.Config) (*Client, error) {
	f := LocalFiles(cfg.Node.StateDir)
	rc := &rest.Config{Host: LocalURL(cfg), TLSClientConfig: rest.TLSClientConfig{
		CertFile: f.Cert, KeyFile: f.Key,
		// The serving certificate is self-signed unless configured; the
		// connection stays on the node.
		Insecure: true,
	}}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("node-local client certificate %s (is nodelet-server started?): %w", f.Cert, err)
	}
	return &Client{base: rc.Host, rest: rc, http: hc}, nil
}

func (c *Client) get(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

// Pod returns the node's pod namespace/name from /pods.
func (c *Client) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	resp, err := c.get(ctx, "/pods", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list corev1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Namespace == namespace && p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s is not on this node", namespace, name)
}

// LogOptions are the `nodelet logs` flags.
type LogOptions struct {
	Follow, Previous, Timestamps bool
	// TailLines < 0 means every line.
	TailLines int64
}

// Logs copies the container's log to w.
func (c *Client) Logs(ctx context.Context, namespace, pod, container string, o LogOptions, w io.Writer) error {
	q := url.Values{}
	if o.Follow {
		q.Set("follow", "true")
	}
	if o.Previous {
		q.Set("previous", "true")
	}
	if o.Timestamps {
		q.Set("timestamps", "true")
	}
	if o.TailLines >= 0 {
		q.Set("tailLines", strconv.FormatInt(o.TailLines, 10))
	}
	resp, err := c.get(ctx, "/containerLogs/"+url.PathEscape(namespace)+"/"+url.PathEscape(pod)+"/"+url.PathEscape(container), q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Exec runs cmd in the container over WebSocket, falling back to SPDY as
// kubectl does. A non-zero exit of cmd is a k8s.io/client-go/util/exec
// CodeExitError.
func (c *Client) Exec(ctx context.Context, namespace, pod, container string, cmd []string, tty bool, stdin io.Reader, stdout, stderr io.Writer) error {
	// The kubelet's exec parameters (input, output, error, tty), as
	// kube-apiserver sends them.
	q := url.Values{corev1.ExecCommandParam: cmd}
	q.Set(corev1.ExecStdoutParam, "1")
	if stdin != nil {
		q.Set(corev1.ExecStdinParam, "1")
	}
	if tty {
		q.Set(corev1.ExecTTYParam, "1")
	} else {
		q.Set(corev1.ExecStderrParam, "1")
	}
	u, err := url.Parse(c.base + "/exec/" + url.PathEscape(namespace) + "/" + url.PathEscape(pod) + "/" + url.PathEscape(container) + "?" + q.Encode())
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(c.rest, "GET", u.String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.rest, "POST", u)
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Tty: tty}
	if !tty {
		opts.Stderr = stderr
	}
	return ex.StreamWithContext(ctx, opts)
}
