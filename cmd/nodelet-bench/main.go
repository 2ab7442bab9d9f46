// Command nodelet-bench measures nodelet's pod start-up and teardown
// against the raw CRI floor on a private containerd, and the agent's own
// cost. scripts/bench.sh builds and runs it; see internal/tools/bench.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/nodelet/nodelet/internal/tools/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodelet-bench:", err)
		os.Exit(2)
	}
	if _, err := bench.Measure(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nodelet-bench:", err)
		os.Exit(1)
	}
}

func parse(args []string) (bench.Options, error) {
	var o bench.Options
	fs := flag.NewFlagSet("nodelet-bench", flag.ContinueOnError)
	ns := fs.String("n", "1,20,50", "burst sizes (pods written at once)")
	bounds := fs.String("bounds", "1,2,4,0", "runtime.maxConcurrentSandboxCreations values to measure, 0 = unbounded (the floor uses the same)")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds per contender, bound and N (contenders alternate)")
	fs.StringVar(&o.BinDir, "bin-dir", "bin", "directory of nodelet and the nodelet-* daemons")
	fs.StringVar(&o.Out, "out", bench.DefaultOut, "JSON result file")
	fs.DurationVar(&o.Idle, "idle", bench.DefaultIdle, "idle measurement with the largest burst running (0 skips it)")
	fs.IntVar(&o.SummaryRequests, "summary-requests", bench.DefaultSummaryRequests, "GETs of each agent's /stats/summary timed with the burst running (0 skips them)")
	fs.DurationVar(&o.Settle, "settle", bench.DefaultSettle, "pause between the node being ready and the burst")
	fs.DurationVar(&o.Timeout, "timeout", 0, "bound on each burst and each teardown (0: 5m or 3s per pod, whichever is longer)")
	fs.StringVar(&o.WorkDir, "work-dir", "", "directory for the nodes' state and logs (default: a temporary one)")
	fs.BoolVar(&o.KeepWorkDir, "keep", false, "keep the work directory (node logs) at the end")
	fs.BoolVar(&o.Timelines, "timelines", false, "include every pod's moments in the JSON result")
	fs.IntVar(&o.ContainerdMajor, "containerd", 2, "the private containerd: 2 (containerd 2.x, built by scripts/containerd2.sh) or 1 (Debian's 1.6)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.ContainerdMajor != 1 && o.ContainerdMajor != 2 {
		return o, fmt.Errorf("-containerd: %d is neither 1 nor 2", o.ContainerdMajor)
	}
	var err error
	if o.Ns, err = ints("-n", *ns); err != nil {
		return o, err
	}
	if o.Bounds, err = ints("-bounds", *bounds); err != nil {
		return o, err
	}
	o.KubeletBin = os.Getenv("KUBELET_BIN")
	o.Command = "nodelet-bench " + strings.Join(args, " ")
	return o, nil
}

func ints(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a number", flag, f)
		}
		out = append(out, n)
	}
	return out, nil
}
