package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// remoteListener is the suite's side of the proxy (test/e2e/storage/drivers/
// proxy.Listen): it opens connections to the proxy's port ahead of need and
// hands each to a gRPC server as an accepted one.
type remoteListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *remoteListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *remoteListener) Close() error   { return nil }
func (l *remoteListener) Addr() net.Addr { return &net.UnixAddr{Name: "proxy", Net: "unix"} }

func TestHostpathpluginProxy(t *testing.T) {
	// A free port on loopback for the proxy's far end.
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pl.Addr().String()
	pl.Close()
	sock := filepath.Join(t.TempDir(), "dra.sock")

	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	proxyDone := make(chan error, 1)
	go func() { proxyDone <- runProxy(ctx, "unix://"+sock, "tcp://"+port, &logs) }()

	// The suite's end: connections dialled in advance, served by gRPC.
	rl := &remoteListener{conns: make(chan net.Conn, 4), done: make(chan struct{})}
	eventually.True(t, 10*time.Second, "the proxy listens on "+port, func() bool {
		c, err := net.Dial("tcp", port)
		if err != nil {
			return false
		}
		rl.conns <- c
		return true
	})
	for range 2 {
		c, err := net.Dial("tcp", port)
		if err != nil {
			t.Fatal(err)
		}
		rl.conns <- c
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("dra", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(rl) }()
	t.Cleanup(func() { close(rl.done); srv.Stop() })

	// The node agent's end: two clients, one after the other, each on a
	// connection of its own, as the plugin watcher and the DRA client are.
	for i := range 2 {
		cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{Service: "dra"}, grpc.WaitForReady(true))
		ccancel()
		cc.Close()
		if err != nil {
			t.Fatalf("client %d through the proxy: %v", i, err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("client %d: status %v", i, resp.Status)
		}
	}

	cancel()
	select {
	case err := <-proxyDone:
		if err != nil {
			t.Fatalf("runProxy after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runProxy did not return after its context ended")
	}
	if !strings.Contains(logs.String(), "proxying "+sock) {
		t.Fatalf("log %q does not name the socket", logs.String())
	}
}

func TestHostpathpluginFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--endpoint and --proxy-endpoint are both required"},
		{[]string{"--endpoint=/x.sock"}, "both required"},
		{[]string{"--endpoint=/x.sock", "--proxy-endpoint=127.0.0.1:1"}, `want tcp://[HOST]:PORT`},
		{[]string{"--nodeid=x"}, "flag provided but not defined: -nodeid"},
	} {
		var stderr bytes.Buffer
		if code := hostpathplugin(tc.args, nil, nil, &stderr); code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("hostpathplugin %q = %d, %q; want failure naming %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}
