package kubeclient

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/certificate"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// certMetrics are the kubelet's certificate manager families, registered
// in the process that runs the manager (nodelet-status the client's,
// nodelet-server the serving one's) when it is made, as the kubelet
// registers them only when rotation is on:
//
//   - client: kubelet_certificate_manager_client_ttl_seconds (cmd/kubelet/
//     app/server.go buildKubeletClientConfig) and
//     kubelet_certificate_manager_client_expiration_renew_errors
//     (NewKubeletClientCertificateManager);
//   - serving: kubelet_server_expiration_renew_errors,
//     kubelet_certificate_manager_server_rotation_seconds and
//     kubelet_certificate_manager_server_ttl_seconds
//     (NewKubeletServerCertificateManager).
type certMetrics struct {
	once    sync.Once
	current atomic.Pointer[certificate.Manager]
}

var clientCertMetrics, servingCertMetrics certMetrics

var (
	clientRenewErrors = kubeletmetrics.Counter("kubelet_certificate_manager_client_expiration_renew_errors",
		"Counter of certificate renewal errors.")
	servingRenewErrors = kubeletmetrics.Counter("kubelet_server_expiration_renew_errors",
		"Counter of certificate renewal errors.")
	servingRotationAge = kubeletmetrics.Histogram("kubelet_certificate_manager_server_rotation_seconds",
		"Histogram of the number of seconds the previous certificate lived before being rotated.", kubeletmetrics.CertRotationBuckets)
)

// ttl is the kubelet's TTL gauge function: seconds until the current
// certificate expires, +Inf without one.
func (c *certMetrics) ttl() float64 {
	if m := c.current.Load(); m != nil {
		if cert := (*m).Current(); cert != nil && cert.Leaf != nil {
			return math.Trunc(time.Until(cert.Leaf.NotAfter).Seconds())
		}
	}
	return math.Inf(1)
}

// registerClient registers the client certificate families once per
// process and points the TTL at m.
func registerClient(m certificate.Manager) {
	clientCertMetrics.current.Store(&m)
	clientCertMetrics.once.Do(func() {
		kubeletmetrics.MustRegister(clientRenewErrors, kubeletmetrics.GaugeFunc("kubelet_certificate_manager_client_ttl_seconds",
			"Gauge of the TTL (time-to-live) of the Kubelet's client certificate. "+
				"The value is in seconds until certificate expiry (negative if already expired). "+
				"If client certificate is invalid or unused, the value will be +INF.", clientCertMetrics.ttl))
	})
}

// registerServing registers the serving certificate families once per
// process and points the TTL at m.
func registerServing(m certificate.Manager) {
	servingCertMetrics.current.Store(&m)
	servingCertMetrics.once.Do(func() {
		kubeletmetrics.MustRegister(servingRenewErrors, servingRotationAge, kubeletmetrics.GaugeFunc("kubelet_certificate_manager_server_ttl_seconds",
			"Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. "+
				"The value is in seconds until certificate expiry (negative if already expired). "+
				"If serving certificate is invalid or unused, the value will be +INF.", servingCertMetrics.ttl))
	})
}
