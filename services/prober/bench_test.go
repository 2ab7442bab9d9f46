package prober

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/schemas"
)

// benchServerEnv makes the test binary a probe target (see TestMain): an
// HTTP server and a TCP listener on loopback, in a process of their own so
// that their CPU is not counted as the prober's.
const benchServerEnv = "NODELET_PROBER_BENCH_SERVER"

func benchServerMain() {
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	go func() {
		_ = http.Serve(hl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	}()
	fmt.Printf("%d %d\n", hl.Addr().(*net.TCPAddr).Port, tl.Addr().(*net.TCPAddr).Port)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes stdin
	os.Exit(0)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProber110Pods measures what a full node costs nodelet-prober:
// 110 pods × 3 probes (liveness tcpSocket and readiness httpGet on one
// container, liveness httpGet on a second) at periodSeconds 1, against
// loopback servers in another process, through the real bus. It reports
// the CPU time the process (prober and its in-process bus) uses per second
// of wall time once every result is in, and per probe. Run it alone:
//
//	go test -run '^$' -bench Prober110Pods -benchtime 1x ./services/prober/
func BenchmarkProber110Pods(b *testing.B) {
	const pods, window = 110, 10 * time.Second
	srv := exec.Command(os.Args[0])
	srv.Env = append(os.Environ(), benchServerEnv+"=1")
	stdin, err := srv.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = srv.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	ports := strings.Fields(line)
	httpPort, _ := strconv.Atoi(ports[0])
	tcpPort, _ := strconv.Atoi(ports[1])

	bb := bustest.Start(b)
	var put func(bucket, key string, m schemas.Message)
	sources, rt := bb.Connect(bus.Sources), bb.Connect(bus.Runtime)
	put = func(bucket, key string, m schemas.Message) {
		c := sources
		if bucket == bus.BucketObserved {
			c = rt
		}
		if _, err := c.Put(context.Background(), bucket, key, m); err != nil {
			b.Fatal(err)
		}
	}
	httpGet := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(httpPort))}}
	tcp := corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}}
	var keys []probeKey
	for i := 0; i < pods; i++ {
		uid := fmt.Sprintf("bench-%03d", i)
		pod := testPod(uid, corev1.Container{Name: "a", LivenessProbe: fast(tcp, 3), ReadinessProbe: fast(httpGet, 3)})
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "b", LivenessProbe: fast(httpGet, 3)})
		o := observed(uid, running("a", uid+"-a", time.Now()), running("b", uid+"-b", time.Now()))
		o.Sandbox.IPs = []string{"127.0.0.1"}
		put(bus.BucketDesired, uid, &schemas.PodDesired{Pod: pod, Source: schemas.SourceFile})
		put(bus.BucketObserved, uid, o)
		keys = append(keys, probeKey{uid: uid, container: "a", kind: schemas.ProbeReadiness})
	}
	m, err := New(Options{Deps: daemon.Deps{Bus: bb.Connect(bus.Prober), Log: bustest.Logger()}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Wait until every pod is ready: all workers run.
	deadline := time.Now().Add(2 * time.Minute)
	for _, k := range keys {
		for r, _ := m.results.get(k); r.Result != schemas.ProbeSuccess; r, _ = m.results.get(k) {
			if time.Now().After(deadline) {
				b.Fatalf("%s not ready", k)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := m.workerCount(); n != 3*pods {
		b.Fatalf("%d workers, want %d", n, 3*pods)
	}
	time.Sleep(2 * time.Second) // past the start-up spread
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		probes0, cpu0, wall0 := totalProbes(b), cpuTime(), time.Now()
		time.Sleep(window)
		probes, cpu, wall := totalProbes(b)-probes0, cpuTime()-cpu0, time.Since(wall0)
		b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu-s/s")
		b.ReportMetric(probes/wall.Seconds(), "probes/s")
		b.ReportMetric(float64(cpu.Microseconds())/probes, "cpu-µs/probe")
	}
	b.StopTimer()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
}

// totalProbes sums nodelet_prober_probe_total of the bench pods.
func totalProbes(b *testing.B) float64 {
	mfs, err := Gatherer().Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "nodelet_prober_probe_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
