package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/component-base/version"
	utilio "k8s.io/utils/io"
)

// maxRespBodyLength bounds what is read of a probe's response body.
const maxRespBodyLength = 10 * 1 << 10 // 10KB

// userAgent is the kubelet's probe User-Agent, kube-probe/<major.minor> of
// the Kubernetes API nodelet implements.
var userAgent = "kube-probe/" + version.DefaultKubeBinaryVersion

// httpProber runs httpGet probes like the kubelet's pkg/probe/http: no
// proxy, no keep-alive, no compression, TLS without verification, and
// redirects followed only to the same host (a redirect elsewhere ends the
// probe with a warning, which counts as success).
type httpProber struct {
	transport *http.Transport
}

func newHTTPProber() *httpProber {
	t := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, as the kubelet's
		DisableKeepAlives:  true,
		Proxy:              http.ProxyURL(nil),
		DisableCompression: true, // no Accept-Encoding header
		DialContext:        probeDialer().DialContext,
	})
	return &httpProber{transport: t}
}

func (p *httpProber) probe(req *http.Request, timeout time.Duration) (outcome, string, error) {
	client := &http.Client{
		Timeout:       timeout,
		Transport:     p.transport,
		CheckRedirect: redirectChecker,
	}
	return doHTTPProbe(req, client)
}

// doHTTPProbe: 200-299 is success, 300-399 (a redirect not followed) a
// warning, anything else or no answer a failure. The failure message
// carries the status code, never the body (https://issue.k8s.io/99425).
func doHTTPProbe(req *http.Request, client *http.Client) (outcome, string, error) {
	res, err := client.Do(req)
	if err != nil {
		// Errors (timeouts included) are failures.
		return outcomeFailure, err.Error(), nil
	}
	defer res.Body.Close()
	b, err := utilio.ReadAtMost(res.Body, maxRespBodyLength)
	if err != nil && !errors.Is(err, utilio.ErrLimitReached) {
		return outcomeFailure, "", err
	}
	body := string(b)
	if res.StatusCode >= http.StatusOK && res.StatusCode < http.StatusBadRequest {
		if res.StatusCode >= http.StatusMultipleChoices {
			return outcomeWarning, fmt.Sprintf("Probe terminated redirects, Response body: %v", body), nil
		}
		return outcomeSuccess, body, nil
	}
	return outcomeFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode), nil
}

// redirectChecker follows redirects on the same host, at most 10, and
// returns the redirect response itself for one to another host (the
// kubelet's followNonLocalRedirects=false).
func redirectChecker(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// newHTTPRequest builds the request of an httpGet probe (the kubelet's
// NewRequestForHTTPGetAction): scheme (default http), host (default the pod
// IP), port by number or by the name of a container port, path, headers;
// User-Agent and Accept */* unless the probe sets them (an empty Accept
// removes it); a Host header becomes the request's Host.
func newHTTPRequest(ctx context.Context, g *corev1.HTTPGetAction, c *corev1.Container, podIP string) (*http.Request, error) {
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := g.Host
	if host == "" {
		host = podIP
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(g.Path)
	if err != nil {
		// Too late to reject a bad path; pass it on as is, as the kubelet does.
		u = &url.URL{Path: g.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	headers := http.Header{}
	for _, h := range g.HTTPHeaders {
		headers.Add(h.Name, h.Value)
	}
	if _, ok := headers["User-Agent"]; !ok {
		headers.Set("User-Agent", userAgent)
	}
	if _, ok := headers["Accept"]; !ok {
		headers.Set("Accept", "*/*")
	} else if headers.Get("Accept") == "" {
		headers.Del("Accept")
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}
