package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/term"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/services/server/client"
)

func init() {
	commands = append(commands,
		command{"logs", "a container's log through the node's kubelet API: logs POD [-c C] [-f] [--previous] [--tail N]", runLogs},
		command{"exec", "run a command in a container through the node's kubelet API: exec POD [-c C] [-i] [-t] -- CMD...", runExec})
}

// podArg splits POD (name or namespace/name) and finds the container: -c,
// else the pod's first container.
func podArg(ctx context.Context, c *client.Client, arg, namespace, container string) (string, string, string, error) {
	ns, name := namespace, arg
	if i := strings.IndexByte(arg, '/'); i >= 0 {
		ns, name = arg[:i], arg[i+1:]
	}
	if ns == "" {
		ns = "default"
	}
	if container != "" {
		return ns, name, container, nil
	}
	p, err := c.Pod(ctx, ns, name)
	if err != nil {
		return "", "", "", err
	}
	if len(p.Spec.Containers) == 0 {
		return "", "", "", fmt.Errorf("pod %s/%s has no containers", ns, name)
	}
	return ns, name, p.Spec.Containers[0].Name, nil
}

func runLogs(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := newInvocation("logs")
	f := in.Flags
	namespace := f.StringP("namespace", "n", "", "the pod's namespace (default \"default\"; or POD as namespace/name)")
	container := f.StringP("container", "c", "", "container (default: the pod's first)")
	follow := f.BoolP("follow", "f", false, "follow the log")
	previous := f.BoolP("previous", "p", false, "the previous instance of the container")
	timestamps := f.Bool("timestamps", false, "prefix each line with its time")
	tail := f.Int64("tail", -1, "lines from the end (-1 = all)")
	if code, ok := in.parse(args); !ok {
		return code
	}
	if f.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "nodelet logs: want one POD")
		return config.ExitCode
	}
	c, ns, pod, ctr, code, ok := in.podTarget(ctx, f.Arg(0), *namespace, *container)
	if !ok {
		return code
	}
	err := c.Logs(ctx, ns, pod, ctr, client.LogOptions{Follow: *follow, Previous: *previous, Timestamps: *timestamps, TailLines: *tail}, os.Stdout)
	if err != nil {
		return in.fail(1, err)
	}
	return 0
}

// podTarget loads the config, makes the node-local client and resolves
// the POD argument and -c to a namespace, pod and container; !ok means exit
// with code.
func (in *invocation) podTarget(ctx context.Context, arg, namespace, container string) (c *client.Client, ns, pod, ctr string, code int, ok bool) {
	cfg, code, ok := in.load()
	if !ok {
		return nil, "", "", "", code, false
	}
	c, err := client.New(cfg)
	if err == nil {
		ns, pod, ctr, err = podArg(ctx, c, arg, namespace, container)
	}
	if err != nil {
		return nil, "", "", "", in.fail(1, err), false
	}
	return c, ns, pod, ctr, 0, true
}

func runExec(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	in := newInvocation("exec")
	f := in.Flags
	namespace := f.StringP("namespace", "n", "", "the pod's namespace (default \"default\"; or POD as namespace/name)")
	container := f.StringP("container", "c", "", "container (default: the pod's first)")
	stdin := f.BoolP("stdin", "i", false, "pass stdin to the command")
	tty := f.BoolP("tty", "t", false, "allocate a TTY")
	if code, ok := in.parse(args); !ok {
		return code
	}
	if f.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "nodelet exec: want POD -- CMD...")
		return config.ExitCode
	}
	c, ns, pod, ctr, code, ok := in.podTarget(ctx, f.Arg(0), *namespace, *container)
	if !ok {
		return code
	}
	var r io.Reader
	if *stdin {
		r = os.Stdin
	}
	if *tty && *stdin && term.IsTerminal(int(os.Stdin.Fd())) {
		old, err := term.MakeRaw(int(os.Stdin.Fd()))
		if err == nil {
			defer func() { _ = term.Restore(int(os.Stdin.Fd()), old) }()
		}
	}
	err := c.Exec(ctx, ns, pod, ctr, f.Args()[1:], *tty, r, os.Stdout, os.Stderr)
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	default:
		return in.fail(1, err)
	}
}
