// Command soak keeps a node of a real cluster on this machine at its pod
// limit through thousands of pod lifecycles and reports what the node agent
// costs as they pass and what is left after (internal/tools/soak);
// scripts/soak.sh builds the tools and calls it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/tools/soak"
)

func main() {
	var (
		o                  soak.Options
		agents, k8sBin     string
		nodeletBin, report string
		short              bool
		boundMiB           float64
		boundGor, boundFDs float64
	)
	flag.StringVar(&agents, "agent", "both", "agents to soak, one after the other: nodelet, kubelet, both (nodelet then the kubelet) or a comma-separated list")
	flag.IntVar(&o.Lifecycles, "lifecycles", 5000, "end the churn after this many pod lifecycles")
	flag.DurationVar(&o.Duration, "duration", 0, "end the churn after this long, if sooner (0: no limit)")
	flag.IntVar(&o.Pods, "pods", 110, "pods the node is kept at (its maxPods)")
	flag.IntVar(&o.Warmup, "warmup", 0, "lifecycles left out of the growth figures (default: a fifth, at most 500)")
	flag.DurationVar(&o.Every, "every", 15*time.Second, "time between samples")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the churn's choices")
	flag.BoolVar(&short, "short", false, "a quick check: 20 pods, 60 lifecycles, a sample every 5s")
	flag.Float64Var(&boundMiB, "bound-mem", 2, "PSS and RSS growth allowed per process per 1,000 lifecycles, MiB")
	flag.Float64Var(&boundGor, "bound-goroutines", 5, "goroutines allowed to grow per process per 1,000 lifecycles")
	flag.Float64Var(&boundFDs, "bound-fds", 5, "open fds allowed to grow per process per 1,000 lifecycles")
	flag.StringVar(&o.Out, "out", "/tmp/nodelet-soak", "directory of result.json and the plots")
	flag.StringVar(&k8sBin, "k8s-bin", "", "directory of kube-controller-manager, kube-scheduler, kube-proxy and kubelet")
	flag.StringVar(&nodeletBin, "nodelet-bin", "", "directory of the nodelet binaries (default: next to this one)")
	flag.StringVar(&o.Work, "work", "/var/lib/nodelet-soak", "the cluster's scratch directory (removed at the end)")
	flag.DurationVar(&o.LockWait, "wait", 2*time.Hour, "how long to wait for another cluster on this machine to go")
	flag.StringVar(&report, "report", "", "run no soak: print the figures of past runs' result.json files (comma-separated, e.g. nodelet's and the kubelet's from two sessions) by this build's measure, -warmup overriding theirs, and write the merged result and plots to -out")
	flag.Parse()
	if short {
		o.Pods, o.Lifecycles, o.Every, o.Quiet, o.Settle = 20, 60, 5*time.Second, 10*time.Second, time.Minute
	}
	o.Bounds = soak.Bounds{Memory: boundMiB * (1 << 20), Goroutines: boundGor, FDs: boundFDs}
	if report != "" {
		rep, err := soak.ReadReports(strings.Split(report, ","), o.Bounds, o.Warmup)
		if err != nil {
			fail(err)
		}
		rep.Print(os.Stdout)
		if o.Out != "" {
			if err := rep.Write(o.Out); err != nil {
				fail(err)
			}
			fmt.Printf("\nresult: %s; plots: %s\n", filepath.Join(o.Out, "result.json"), filepath.Join(o.Out, "*.png"))
		}
		return
	}
	if agents == "both" {
		agents = "nodelet,kubelet"
	}
	for _, a := range strings.Split(agents, ",") {
		switch a := cluster.Agent(strings.TrimSpace(a)); a {
		case cluster.Nodelet, cluster.Kubelet:
			o.Agents = append(o.Agents, a)
		default:
			fail(fmt.Errorf("-agent %q: want nodelet, kubelet or both", a))
		}
	}
	if k8sBin == "" {
		fail(fmt.Errorf("-k8s-bin is required (scripts/soak.sh passes it)"))
	}
	if nodeletBin == "" {
		exe, err := os.Executable()
		if err != nil {
			fail(err)
		}
		nodeletBin = filepath.Dir(exe)
	}
	o.Bins = cluster.Binaries{
		Nodelet:               nodeletBin,
		KubeControllerManager: filepath.Join(k8sBin, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(k8sBin, "kube-scheduler"),
		KubeProxy:             filepath.Join(k8sBin, "kube-proxy"),
		Kubelet:               filepath.Join(k8sBin, "kubelet"),
	}
	o.Log = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s soak: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGUSR1 ends the churn early, keeping the run's figures.
	churn, endChurn := signal.NotifyContext(context.Background(), syscall.SIGUSR1)
	defer endChurn()
	o.EndChurn = churn.Done()
	o.Command = strings.Join(os.Args, " ")
	rep, err := soak.Run(ctx, o)
	rep.Print(os.Stdout)
	if o.Out != "" {
		fmt.Printf("\nresult: %s; plots: %s\n", filepath.Join(o.Out, "result.json"), filepath.Join(o.Out, "*.png"))
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "soak:", err)
	os.Exit(1)
}
