package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// healthzRetry is how long the kubelet waits before it tries its healthz
// port again (RunKubelet's wait.UntilWithContext period).
const healthzRetry = 5 * time.Second

// HealthzAddr is the address of the kubelet's healthz port, once it listens.
func (s *Daemon) HealthzAddr() string {
	v, _ := s.hzAddr.Load().(string)
	return v
}

// runHealthz is the kubelet's healthz server (cmd/kubelet/app/server.go
// RunKubelet: healthz.InstallHandler on healthzBindAddress:healthzPort):
// plain HTTP, no authentication, GET /healthz and /healthz/ping. The
// kubelet's answers ping only; nodelet's /healthz is the one server.port
// serves (every daemon's heartbeat, nodelet-server's watches, the
// runtime), so what kubeadm polls says whether the node agent works. As in
// the kubelet, a port that cannot be bound is logged and tried again every
// 5 s, never fatal: the kubelet API keeps serving.
func (s *Daemon) runHealthz(ctx context.Context, wg *sync.WaitGroup) {
	port := s.cfg.Server.HealthzPort
	if port == 0 {
		return
	}
	addr := net.JoinHostPort(s.cfg.Server.HealthzBindAddress, strconv.Itoa(port))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.readOnly.serveHealthz)
	mux.HandleFunc("GET /healthz/ping", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	srv := s.httpServer(mux)
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		defer wg.Done()
		for {
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				s.hzAddr.Store(ln.Addr().String())
				s.log.Info("Serving healthz", "address", ln.Addr().String())
				err = srv.Serve(netutil.LimitListener(ln, s.limits.MaxConnections))
				if errors.Is(err, http.ErrServerClosed) {
					return
				}
			}
			s.log.Error("Failed to start healthz server", "address", addr, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-s.clock.After(healthzRetry):
			}
		}
	}()
}
