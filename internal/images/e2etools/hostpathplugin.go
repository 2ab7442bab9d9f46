package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
)

// hostpathplugin stands in for the proxy mode of
// registry.k8s.io/sig-storage/hostpathplugin, the only mode the e2e DRA
// specs use (test/e2e/dra/utils/deploy.go Driver.listen): the suite runs
// the DRA driver inside e2e.test and execs
//
//	/hostpathplugin --v=5 --endpoint=SOCKET --proxy-endpoint=tcp://:PORT
//
// in its pod on the node, then opens connections to PORT through the
// kubelet's port-forward ahead of need (test/e2e/storage/drivers/proxy).
// Every connection the node agent makes to SOCKET is joined to one of
// those, first come first served, and the bytes go both ways until either
// side closes. Nothing else of the CSI hostpath driver is here.
func hostpathplugin(args []string, _ io.Reader, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("hostpathplugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "unix socket the node agent connects to")
	proxy := fs.String("proxy-endpoint", "", "tcp://[HOST]:PORT the other end of each connection comes from")
	fs.Int("v", 0, "log verbosity (ignored)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *endpoint == "" || *proxy == "" {
		fmt.Fprintln(stderr, "hostpathplugin: only the proxy mode is here: --endpoint and --proxy-endpoint are both required")
		return 2
	}
	if err := runProxy(context.Background(), *endpoint, *proxy, stderr); err != nil {
		fmt.Fprintf(stderr, "hostpathplugin: %v\n", err)
		return 1
	}
	return 0
}

// runProxy serves until ctx is done or a listener fails.
func runProxy(ctx context.Context, endpoint, proxy string, logw io.Writer) error {
	addr, ok := strings.CutPrefix(proxy, "tcp://")
	if !ok {
		return fmt.Errorf("--proxy-endpoint %q: want tcp://[HOST]:PORT", proxy)
	}
	path := strings.TrimPrefix(endpoint, "unix://")
	remote, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer remote.Close()
	// A socket left by an earlier run (the suite removes it after killing
	// the proxy, but not always before the next one starts).
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	local, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	defer local.Close()
	fmt.Fprintf(logw, "hostpathplugin: proxying %s to connections on %s\n", path, remote.Addr())

	stop := context.AfterFunc(ctx, func() { remote.Close(); local.Close() })
	defer stop()

	// Connections from the far end wait here for a local one; the suite
	// keeps at most ten open at a time.
	waiting := make(chan net.Conn, 16)
	errc := make(chan error, 2)
	quit := make(chan struct{})
	go func() {
		for {
			c, err := remote.Accept()
			if err != nil {
				errc <- err
				return
			}
			select {
			case waiting <- c:
			default: // more than the suite ever opens
				c.Close()
			}
		}
	}()
	// Joined pairs are closed on the way out, so that the wait ends.
	var (
		mu   sync.Mutex
		open = map[net.Conn]bool{}
		wg   sync.WaitGroup
	)
	track := func(cs ...net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range cs {
			open[c] = true
		}
	}
	defer func() {
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	go func() {
		for {
			c, err := local.Accept()
			if err != nil {
				errc <- err
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case r := <-waiting:
					track(c, r)
					join(c, r)
				case <-quit:
					c.Close()
				}
			}()
		}
	}()
	err = <-errc
	remote.Close()
	local.Close()
	<-errc // both accept loops are done: nothing is added to wg or waiting now
	close(quit)
	for len(waiting) > 0 {
		(<-waiting).Close()
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// join copies a to b and b to a until one side is done, then closes both.
func join(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { a.Close(); b.Close() }
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); once.Do(closeBoth); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); once.Do(closeBoth); done <- struct{}{} }()
	<-done
	<-done
}
