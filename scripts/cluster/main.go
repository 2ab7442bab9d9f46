// Command cluster runs a cluster of several nodes on this machine, offline,
// in the background (internal/cluster): scripts/cluster.sh builds the tools
// and calls it.
//
//	cluster up [-nodes N] [-agent nodelet|kubelet]   start it, return when Ready
//	cluster status                                   say whether it runs, its nodes
//	cluster down                                     take it down, leave nothing
//
// `up` starts `cluster serve` as a daemon of its own (its own session, its
// output in <run>/cluster.log), which holds the cluster and takes it down on
// SIGTERM; every process of the cluster dies with it (Pdeathsig), so even a
// killed serve leaves only what the next up or down removes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/images"
)

const (
	// stateDir holds what `up` leaves for `status` and `down`.
	stateDir = "/run/nodelet-cluster/serve"
	// defaultWork is the cluster's scratch directory.
	defaultWork = "/var/lib/nodelet-cluster"
)

// state is what a running serve wrote.
type state struct {
	Pid        int      `json:"pid"`
	Kubeconfig string   `json:"kubeconfig"`
	Agent      string   `json:"agent"`
	Nodes      []string `json:"nodes"`
	Log        string   `json:"log"`
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "status":
		var running bool
		running, err = status()
		if err == nil && !running {
			os.Exit(3)
		}
	case "down":
		err = down()
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cluster up [-nodes N] [-agent nodelet|kubelet] [-k8s-bin DIR] [-nodelet-bin DIR] | status | down")
	os.Exit(2)
}

type flags struct {
	nodes      int
	agent      string
	containerd int
	k8sBin     string
	nodeletBin string
	work       string
}

func parse(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.IntVar(&f.nodes, "nodes", 2, "number of nodes")
	fs.StringVar(&f.agent, "agent", "nodelet", "node agent: nodelet or kubelet")
	fs.IntVar(&f.containerd, "containerd", 2, "every node's containerd: 2 (2.x, built and cached by scripts/containerd2.sh) or 1 (Debian's 1.6)")
	fs.StringVar(&f.k8sBin, "k8s-bin", "", "directory of kube-controller-manager, kube-scheduler, kube-proxy, kubelet and coredns")
	fs.StringVar(&f.nodeletBin, "nodelet-bin", "", "directory of the nodelet binaries (default: next to this one)")
	fs.StringVar(&f.work, "work", defaultWork, "the cluster's scratch directory (removed by down)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.agent != string(cluster.Nodelet) && f.agent != string(cluster.Kubelet) {
		return f, fmt.Errorf("-agent %q: want nodelet or kubelet", f.agent)
	}
	if f.containerd != 1 && f.containerd != 2 {
		return f, fmt.Errorf("-containerd %d: want 1 or 2", f.containerd)
	}
	if f.nodes < 1 {
		return f, fmt.Errorf("-nodes %d: want 1 or more", f.nodes)
	}
	if f.k8sBin == "" {
		return f, errors.New("-k8s-bin is required (scripts/cluster.sh passes it)")
	}
	if f.nodeletBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return f, err
		}
		f.nodeletBin = filepath.Dir(exe)
	}
	return f, nil
}

// up starts serve in the background and waits until it reports the
// cluster Ready, or exits.
func up(args []string) error {
	if _, err := parse(args); err != nil {
		return err
	}
	if st, err := readState(); err == nil && alive(st.Pid) {
		return fmt.Errorf("a cluster already runs (pid %d, kubeconfig %s): scripts/cluster.sh down first", st.Pid, st.Kubeconfig)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(stateDir, "state.json"))
	logPath := filepath.Join(stateDir, "cluster.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, append([]string{"serve"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintf(os.Stderr, "cluster: starting (pid %d, log %s)\n", cmd.Process.Pid, logPath)
	for {
		if st, err := readState(); err == nil && st.Pid == cmd.Process.Pid {
			_, err := status()
			return err
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the cluster did not start (%v); last lines of %s:\n%s", err, logPath, lastLines(logPath, 20))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// serve runs the cluster until SIGTERM or SIGINT.
func serve(args []string) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Printf("cluster: "+format+"\n", a...) }
	bins := cluster.Binaries{
		Nodelet:               f.nodeletBin,
		KubeControllerManager: filepath.Join(f.k8sBin, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(f.k8sBin, "kube-scheduler"),
		KubeProxy:             filepath.Join(f.k8sBin, "kube-proxy"),
		Kubelet:               filepath.Join(f.k8sBin, "kubelet"),
		CoreDNS:               filepath.Join(f.k8sBin, "coredns"),
	}
	dnsImage, err := images.BuildCoreDNS(ctx, bins.CoreDNS, filepath.Join(f.k8sBin, "images"))
	if err != nil {
		return fmt.Errorf("cluster DNS image: %w", err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Nodes: f.nodes, Agent: cluster.Agent(f.agent), Work: f.work, Bins: bins, ContainerdMajor: f.containerd,
		Images: []images.Tarball{dnsImage}, DNSImage: dnsImage.Ref, Log: logf})
	if err != nil {
		return err
	}
	defer func() {
		logf("taking the cluster down")
		c.Stop()
		_ = os.Remove(filepath.Join(stateDir, "state.json"))
		logf("down: no process, namespace, link, rule, mount, cgroup or directory of it is left")
	}()
	// The admin kubeconfig where `status` and users find it.
	kubeconfig := filepath.Join(stateDir, "admin.kubeconfig")
	b, err := os.ReadFile(c.CP.AdminKubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	st := state{Pid: os.Getpid(), Kubeconfig: kubeconfig, Agent: f.agent, Log: filepath.Join(stateDir, "cluster.log")}
	for _, n := range c.Nodes {
		st.Nodes = append(st.Nodes, n.Name)
	}
	j, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(stateDir, "state.json"), j, 0o644); err != nil {
		return err
	}
	logf("ready; kubeconfig %s", kubeconfig)
	<-ctx.Done()
	return nil
}

// status prints the running cluster's nodes; false when none runs.
func status() (bool, error) {
	st, err := readState()
	if err != nil || !alive(st.Pid) {
		fmt.Println("no cluster runs")
		return false, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return true, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return true, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return true, fmt.Errorf("cluster (pid %d) runs but its API does not answer: %w", st.Pid, err)
	}
	fmt.Printf("cluster of %d %s nodes (pid %d, log %s)\nexport KUBECONFIG=%s\n", len(st.Nodes), st.Agent, st.Pid, st.Log, st.Kubeconfig)
	fmt.Printf("%-10s %-8s %-14s %-16s %s\n", "NAME", "STATUS", "INTERNAL-IP", "POD-CIDR", "VERSION")
	for _, n := range nodes.Items {
		ready := "NotReady"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = "Ready"
			}
		}
		ip := ""
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		fmt.Printf("%-10s %-8s %-14s %-16s %s\n", n.Name, ready, ip, n.Spec.PodCIDR, n.Status.NodeInfo.KubeletVersion)
	}
	return true, nil
}

// down stops the running serve and waits for it to have taken everything
// down; with none running it removes what a killed one left.
func down() error {
	st, err := readState()
	if err != nil || !alive(st.Pid) {
		if err := cluster.RemoveLeftovers(defaultWork); err != nil {
			return err
		}
		_ = os.RemoveAll(stateDir)
		fmt.Println("no cluster runs; removed what a killed one may have left")
		return nil
	}
	if err := syscall.Kill(st.Pid, syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for alive(st.Pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster (pid %d) did not stop in 5m; see %s", st.Pid, st.Log)
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Print(lastLines(st.Log, 1), "\n")
	_ = os.RemoveAll(stateDir)
	return nil
}

func readState() (state, error) {
	var st state
	b, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// alive says whether pid runs (and is not a zombie).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
