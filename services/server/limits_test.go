package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/cri"
)

// TestSlowClientsAreCutOff: clients that open connections and send nothing,
// or trickle their headers, are disconnected after ReadHeaderTimeout (the
// TLS handshake included) and leave no goroutine behind; an oversized
// header gets 431; meanwhile the server answers others at once.
func TestSlowClientsAreCutOff(t *testing.T) {
	const timeout = time.Second
	ts := startServer(t, testConfig(t), &cri.Clients{}, func(o *Options) {
		o.Limits = Limits{ReadHeaderTimeout: timeout, MaxHeaderBytes: 64 << 10, MaxConnections: 64}
	})
	if code, _ := ts.get(http.MethodGet, "", "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	ts.client.CloseIdleConnections()
	baseline := serving()

	// 40 silent TCP connections (no TLS handshake) and 10 that finish the
	// handshake and then trickle a header byte every 100ms.
	var wg sync.WaitGroup
	cut := make(chan time.Duration, 50)
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(trickle bool) {
			defer wg.Done()
			start := time.Now()
			raw, err := net.Dial("tcp", ts.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer raw.Close()
			_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
			var c net.Conn = raw
			if trickle {
				tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
				if err := tc.Handshake(); err != nil {
					errs <- fmt.Errorf("handshake: %w", err)
					return
				}
				c = tc
				if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
					errs <- err
					return
				}
				for {
					if _, err := io.WriteString(c, "X"); err != nil {
						break // the server closed the connection
					}
					time.Sleep(100 * time.Millisecond)
					if time.Since(start) > 15*time.Second {
						errs <- errors.New("a trickling client was never cut off")
						return
					}
				}
			} else {
				// Blocks until the server closes the connection (or the
				// client's own deadline ends the wait: never cut off).
				if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
					errs <- errors.New("a silent client was never cut off")
					return
				}
			}
			cut <- time.Since(start)
		}(i%5 == 0)
	}
	// Others are served while the slow ones hold their connections: the
	// answer comes before the first slow client is cut off.
	waitFor(t, 10*time.Second, "the slow clients' connections", func() bool { return serving() >= 40 })
	if code, _ := ts.get(http.MethodGet, "", "/healthz"); code != http.StatusOK {
		t.Errorf("healthz beside slow clients: %d", code)
	}
	if len(cut) > 0 {
		t.Errorf("healthz was answered only after a slow client was cut off")
	}
	wg.Wait()
	close(cut)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(cut); n != 50 {
		t.Errorf("%d of 50 slow clients cut off", n)
	}
	ts.client.CloseIdleConnections()
	waitFor(t, 30*time.Second, "the server's goroutines of the slow clients to end", func() bool {
		return serving() <= baseline
	})

	// Headers beyond MaxHeaderBytes: 431, nothing read further.
	req, _ := http.NewRequest(http.MethodGet, "https://"+ts.Addr()+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 256<<10))
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("oversized header: %d", resp.StatusCode)
	}
}

// TestInflightLimits: streams and other requests each have a bound;
// beyond it the answer is 429 with Retry-After, and the other class is not
// affected.
func TestInflightLimits(t *testing.T) {
	s := &Daemon{}
	s.streamSlots, s.inflight = make(chan struct{}, 2), make(chan struct{}, 1)
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	h := s.limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) *http.Response {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			return nil
		}
		resp.Body.Close()
		return resp
	}
	var wg sync.WaitGroup
	for _, p := range []string{"/exec/ns/p/c", "/containerLogs/ns/p/c?follow=true", "/pods"} {
		wg.Add(1)
		go func() { defer wg.Done(); get(p) }()
		<-entered
	}
	for _, p := range []string{"/attach/ns/p/c", "/portForward/ns/p", "/stats/summary"} {
		resp := get(p)
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s beyond the limit: %+v", p, resp)
		}
	}
	close(release)
	wg.Wait()
	// Slots come back once requests end.
	if resp := get("/pods"); resp == nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/pods after the others ended: %+v", resp)
	}
}

// serving counts the goroutines serving an HTTP connection (in
// net/http's conn.serve): one per connection the server holds, whatever
// else the process runs.
func serving() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "net/http.(*conn).serve(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestStreamLimit: streams beyond MaxStreams get 429 with the words and
// Retry-After of kube-apiserver's max-in-flight filter, while other
// requests still pass; a freed slot is taken again. The default leaves
// room for what real clients hold at once (the e2e DRA specs' driver
// proxies held more than 100 port-forwards).
func TestStreamLimit(t *testing.T) {
	if got := (Limits{}).withDefaults().MaxStreams; got < 500 {
		t.Fatalf("default MaxStreams %d: the DRA specs' proxies need hundreds", got)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	s := &Daemon{inflight: make(chan struct{}, 4), streamSlots: make(chan struct{}, 2)}
	h := s.limited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isStream(r) {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}))
	serve := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		return rec
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); serve("/portForward/ns/pod") }()
	}
	<-entered
	<-entered
	rec := serve("/exec/ns/pod/c")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(rec.Body.String(), "too many streams in flight (2), please try again later") {
		t.Fatalf("third stream: %d %q %q", rec.Code, rec.Header(), rec.Body.String())
	}
	if rec := serve("/pods"); rec.Code != http.StatusOK {
		t.Fatalf("a request beside full stream slots: %d", rec.Code)
	}
	close(release)
	wg.Wait()
	if rec := serve("/exec/ns/pod/c"); rec.Code != http.StatusOK {
		t.Fatalf("a stream once the slots are free: %d", rec.Code)
	}
}
