package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/status"
)

func init() {
	commands = append(commands, command{"pods", "list the node's pods like kubectl get pods: pods [-n NAMESPACE] [-A]", runPods})
}

func runPods(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	flags := pflag.NewFlagSet("nodelet pods", pflag.ContinueOnError)
	loader := config.NewLoader(flags)
	namespace := flags.StringP("namespace", "n", "", "only pods of this namespace")
	all := flags.BoolP("all-namespaces", "A", false, "add a NAMESPACE column")
	timeout := flags.Duration("timeout", 30*time.Second, "give up reading the bus after this long")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return config.ExitCode
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "nodelet pods: unexpected argument %q\n", flags.Arg(0))
		return config.ExitCode
	}
	cfg, err := loader.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet pods: %v\n", err)
		return config.ExitCode
	}
	// Quiet: closing the connection at the end is not worth a warning.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(cfg.Bus.Listen), Component: bus.Tap, StateDir: cfg.Node.StateDir, Log: log, NoRetry: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet pods: %v\n", err)
		return 1
	}
	defer c.NC.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	pods, err := status.LoadPods(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet pods: %v\n", err)
		return 1
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
	if err := status.WritePodTable(os.Stdout, status.PodRows(shown, time.Now()), *all); err != nil {
		fmt.Fprintf(os.Stderr, "nodelet pods: %v\n", err)
		return 1
	}
	return 0
}
