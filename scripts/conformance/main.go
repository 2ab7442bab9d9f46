// Command conformance runs the Kubernetes project's e2e suite (by default its
// [NodeConformance] specs; with -conformance every [Conformance] spec, the
// non-[Serial] ones in parallel and then the [Serial] ones one at a time, as
// Sonobuoy's certified-conformance mode selects them) against a cluster of
// nodelet nodes (or, with -agent kubelet, kubelet nodes on the same layout)
// on this machine, offline, and leaves nothing behind. scripts/conformance.sh
// builds the tools and calls it; see README "Conformance".
//
// The cluster is internal/cluster's (scripts/cluster.sh): the control plane
// on the host, each node in namespaces of its own with its own containerd,
// agent and kube-proxy, and cluster DNS; every containerd's registry.k8s.io
// is a registry this command serves on 127.0.0.1 with stand-ins of the e2e
// images (also imported beforehand, so IfNotPresent never pulls).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/internal/daemon"
)

const (
	defaultFocus = `\[NodeConformance\]`
	defaultSkip  = `\[Serial\]|\[Disruptive\]|\[Slow\]|\[Feature:|\[Alpha\]|\[Flaky\]`
	// What -conformance runs: every [Conformance] spec but what Sonobuoy's
	// certified-conformance mode skips, the [Serial] ones apart.
	conformanceFocus  = `\[Conformance\]`
	conformanceSkip   = `\[Disruptive\]|NoExecuteTaintManager`
	serialFocus       = `\[Conformance\].*\[Serial\]|\[Serial\].*\[Conformance\]`
	serialSkipPattern = `\[Serial\]`
	// What -dra runs: the suite's DRA specs, the kubelet's
	// ([Feature:DynamicResourceAllocation]) included, but those of feature
	// gates that are off by default and the usual skips.
	draFocus = `\[DRA\]`
	draSkip  = `\[Alpha\]|\[Feature:OffByDefault\]|\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]`
)

type options struct {
	focus, skip  string
	work         string // scratch dir, removed at the end
	report       string // ginkgo JSON report, kept
	k8sBin       string // dir of kube-controller-manager, kube-scheduler, agnhost, nnp, e2e.test
	nodeletBin   string // dir of the nodelet binaries
	e2e          string // the suite binary (default <k8sBin>/e2e.test)
	nodes        int
	agent        string // nodelet or kubelet
	containerd   int    // every node's containerd major: 1 (Debian's 1.6) or 2
	conformance  bool   // every [Conformance] spec, [Serial] ones apart
	dra          bool   // the DRA specs: one node on the host's root dir, containerd 2
	wait         time.Duration
	timeout      time.Duration
	procs        int // ginkgo processes; 1 runs e2e.test directly
	extraE2EArgs []string
}

func main() {
	var o options
	flag.StringVar(&o.focus, "focus", defaultFocus, "ginkgo focus regexp")
	flag.StringVar(&o.skip, "skip", defaultSkip, "ginkgo skip regexp")
	flag.StringVar(&o.work, "work", "/tmp/nodelet-conformance", "scratch directory (removed at the end)")
	flag.StringVar(&o.report, "report", "", "ginkgo JSON report file (default conformance-<time>.json in the cache)")
	flag.StringVar(&o.k8sBin, "k8s-bin", "", "directory of kube-controller-manager, kube-scheduler, agnhost, nnp and e2e.test")
	flag.StringVar(&o.nodeletBin, "nodelet-bin", "", "directory of the nodelet binaries (default: next to this one)")
	flag.StringVar(&o.e2e, "e2e", "", "the e2e suite binary (default <k8s-bin>/e2e.test)")
	flag.IntVar(&o.nodes, "nodes", 2, "nodes of the cluster (the scheduling and DaemonSet specs need two)")
	flag.StringVar(&o.agent, "agent", "nodelet", "node agent: nodelet, or kubelet to count the kubelet on the same harness")
	flag.IntVar(&o.containerd, "containerd", 2, "every node's containerd: 2 (2.x, built and cached by scripts/containerd2.sh) or 1 (Debian's 1.6)")
	flag.DurationVar(&o.wait, "wait", 0, "how long to wait for another cluster on this machine to go (tests)")
	flag.BoolVar(&o.conformance, "conformance", false, "run every [Conformance] spec (non-[Serial] in parallel, then [Serial] one at a time) instead of -focus/-skip")
	flag.BoolVar(&o.dra, "dra", false, "run the DRA specs (focus "+draFocus+", skip "+draSkip+") on one node whose root dir is the host's /var/lib/kubelet (the suite's driver mounts it by hostPath), on containerd 2 (CDI); -focus, -skip and -containerd still apply when given")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Hour, "ginkgo timeout of the whole suite")
	flag.IntVar(&o.procs, "procs", 4, "specs run at once (ginkgo processes; most specs wait on pods, not on the CPU); 1 runs e2e.test alone")
	flag.Parse()
	o.extraE2EArgs = flag.Args()
	if o.dra {
		o.draDefaults(setFlags())
	}
	if o.dra && o.conformance {
		fmt.Fprintln(os.Stderr, "conformance: -dra and -conformance select different specs: give one")
		os.Exit(2)
	}
	if o.containerd != 1 && o.containerd != 2 {
		fmt.Fprintf(os.Stderr, "conformance: -containerd %d: want 1 (Debian's 1.6) or 2 (containerd 2.x)\n", o.containerd)
		os.Exit(2)
	}
	if err := o.complete(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	// One run per machine: runs share the cluster's bridge, addresses and
	// namespaces and the work directory, and one's teardown would pull them
	// from under the other.
	lock, err := daemon.Lock(lockDir, "conformance")
	for deadline := time.Now().Add(o.wait); err != nil && time.Now().Before(deadline); time.Sleep(time.Second) {
		lock, err = daemon.Lock(lockDir, "conformance")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: another run uses this machine:", err)
		os.Exit(2)
	}
	defer lock.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

// setFlags names the flags given on the command line.
func setFlags() map[string]bool {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// draDefaults fills what -dra implies and the command line left unset: the
// suite's DRA driver runs in a pod whose hostPaths are the kubelet's
// default /var/lib/kubelet (test/e2e/testing-manifests/dra), so the node's
// root dir must be that, and only one node can have it; the driver's CDI
// devices need containerd 2 (1.6 has no CDI).
func (o *options) draDefaults(set map[string]bool) {
	if !set["focus"] {
		o.focus = draFocus
	}
	if !set["skip"] {
		o.skip = draSkip
	}
	if !set["containerd"] {
		o.containerd = 2
	}
	if !set["nodes"] {
		o.nodes = 1 // more is refused by the cluster (HostRootDir)
	}
}

// draRuntimeConfig serves the resource.k8s.io beta versions beside v1, as
// the DRA specs' own cluster does (test/e2e/dra/kind.yaml runtimeConfig;
// v1alpha3 is left out: its specs need alpha feature gates, which -dra
// skips). The "with v1beta1 API" and "v1beta2 API" specs create claims
// through them.
const draRuntimeConfig = "--runtime-config=resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"

// apiServerArgs are the kube-apiserver flags the run needs beyond the
// harness's.
func (o *options) apiServerArgs() []string {
	if o.dra {
		return []string{draRuntimeConfig}
	}
	return nil
}

// lockDir holds the machine-wide lock of conformance runs.
const lockDir = "/run/nodelet-conformance"

func (o *options) complete() error {
	if os.Geteuid() != 0 {
		return errors.New("run as root (containers, links, mounts)")
	}
	if o.k8sBin == "" {
		return errors.New("-k8s-bin is required (scripts/conformance.sh passes it)")
	}
	if o.nodeletBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.nodeletBin = filepath.Dir(exe)
	}
	if o.e2e == "" {
		o.e2e = filepath.Join(o.k8sBin, "e2e.test")
	}
	if o.report == "" {
		o.report = filepath.Join(filepath.Dir(o.k8sBin), "conformance", "conformance-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	if o.procs < 1 {
		return fmt.Errorf("-procs %d: want 1 or more", o.procs)
	}
	if o.agent != "nodelet" && o.agent != "kubelet" {
		return fmt.Errorf("-agent %q: want nodelet or kubelet", o.agent)
	}
	agent := filepath.Join(o.nodeletBin, "nodelet")
	if o.agent == "kubelet" {
		agent = filepath.Join(o.k8sBin, "kubelet")
	}
	need := []string{o.e2e, agent, filepath.Join(o.k8sBin, "kube-controller-manager"), filepath.Join(o.k8sBin, "kube-scheduler"),
		filepath.Join(o.k8sBin, "kube-proxy"), filepath.Join(o.k8sBin, "coredns")}
	if o.procs > 1 {
		need = append(need, filepath.Join(o.k8sBin, "ginkgo"))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("missing %s: %w", p, err)
		}
	}
	return nil
}

// run sets up the cluster, runs the suite and tears everything down, in
// reverse order of setup, whatever happened. It returns the exit code: 0 when
// every selected spec passed, 1 when some failed.
func run(ctx context.Context, o options) (code int, err error) {
	var undo []func()
	defer func() {
		log("tearing down")
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		log("torn down: no processes, containers, mounts or links of the run are left")
	}()
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return 2, err
	}
	undo = append(undo, func() { _ = os.RemoveAll(o.work) })

	r, err := startCluster(ctx, o, &undo)
	if err != nil {
		return 2, err
	}
	if err := os.MkdirAll(filepath.Dir(o.report), 0o755); err != nil {
		return 2, err
	}
	missing, err := missingImages(ctx, o.e2e, r.images)
	if err != nil {
		log("warning: could not list the suite's images: %v", err)
	}
	if len(missing) > 0 {
		list := strings.TrimSuffix(o.report, ".json") + ".missing-images"
		_ = os.WriteFile(list, []byte(strings.Join(missing, "\n")+"\n"), 0o644)
		log("%d image(s) of the whole suite have no stand-in (listed in %s); a selected spec that uses one cannot start its pod",
			len(missing), list)
	}
	began := time.Now()
	total := &summary{}
	for _, p := range o.phases() {
		log("running %s (focus %q, skip %q, %d at a time); output in %s", filepath.Base(o.e2e), p.focus, p.skip, p.procs, p.logf)
		if err := runSuite(ctx, o, r, p); err != nil {
			log("the suite ended with: %v", err)
		}
		s, err := readReport(p.report)
		if err != nil {
			return 2, fmt.Errorf("reading the report: %w (suite output in %s)", err, p.logf)
		}
		total.add(s)
		fmt.Printf("report: %s\nlog:    %s\n", p.report, p.logf)
		if ctx.Err() != nil {
			break
		}
	}
	total.print(os.Stdout, time.Since(began))
	if total.Failed > 0 {
		return 1, nil
	}
	return 0, nil
}

// phases are the suite's runs: one with -focus and -skip, or with
// -conformance the parallel one and then the serial one.
func (o options) phases() []phase {
	base := strings.TrimSuffix(o.report, ".json")
	if !o.conformance {
		return []phase{{name: "suite", focus: o.focus, skip: o.skip, procs: o.procs, report: o.report, logf: base + ".log"}}
	}
	return []phase{
		{name: "parallel", focus: conformanceFocus, skip: conformanceSkip + "|" + serialSkipPattern, procs: o.procs,
			report: base + "-parallel.json", logf: base + "-parallel.log"},
		{name: "serial", focus: serialFocus, skip: conformanceSkip, procs: 1,
			report: base + "-serial.json", logf: base + "-serial.log"},
	}
}

func log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "conformance: "+format+"\n", args...)
}
