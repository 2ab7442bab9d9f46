package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/tools/podtable"
)

func init() {
	commands = append(commands, command{"pods", "list the node's pods like kubectl get pods: pods [-n NAMESPACE] [-A]", runPods})
}

func runPods(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := newInvocation("pods")
	flags := in.Flags
	namespace := flags.StringP("namespace", "n", "", "only pods of this namespace")
	all := flags.BoolP("all-namespaces", "A", false, "add a NAMESPACE column")
	timeout := flags.Duration("timeout", 30*time.Second, "give up reading the bus after this long")
	if code, ok := in.parse(args); !ok {
		return code
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "nodelet pods: unexpected argument %q\n", flags.Arg(0))
		return config.ExitCode
	}
	cfg, code, ok := in.load()
	if !ok {
		return code
	}
	// Quiet: closing the connection at the end is not worth a warning.
	c, err := connectTap(cfg, slog.LevelError, false)
	if err != nil {
		return in.fail(1, err)
	}
	defer c.NC.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	pods, err := podtable.LoadPods(ctx, c)
	if err != nil {
		return in.fail(1, err)
	}
	var shown []corev1.Pod
	for _, p := range pods {
		if *namespace == "" || p.Namespace == *namespace {
			shown = append(shown, p)
		}
	}
	if len(shown) == 0 {
		fmt.Fprintln(os.Stderr, "No pods found.")
		return 0
	}
	if err := podtable.WritePodTable(os.Stdout, podtable.PodRows(shown, time.Now()), *all); err != nil {
		return in.fail(1, err)
	}
	return 0
}
