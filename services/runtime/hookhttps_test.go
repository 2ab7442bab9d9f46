package runtime

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// An HTTPS lifecycle hook is sent whatever certificate the pod serves, as
// the kubelet's (the postStart/preStop https hook conformance specs serve a
// certificate for 127.0.0.1 on the pod's IP).
func TestHTTPSHookSkipsVerification(t *testing.T) {
	hit := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hit <- r.URL.RequestURI()
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	m := &hookRunner{}
	g := &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Port: intstr.FromInt(p), Path: "/echo?msg=poststart"}
	if err := m.runHTTPHook(context.Background(), &corev1.Container{Name: "c"}, g, []string{host}); err != nil {
		t.Fatalf("https hook: %v", err)
	}
	if got := <-hit; got != "/echo?msg=poststart" {
		t.Errorf("request %q", got)
	}
}
