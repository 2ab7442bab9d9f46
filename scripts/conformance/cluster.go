package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// harness is what the suite runs against: a cluster (internal/cluster) whose
// containerds pull registry.k8s.io from the stand-ins' registry.
type harness struct {
	c      *cluster.Cluster
	cp     *testenv.ControlPlane
	images []string // refs of the stand-ins served and imported
}

// startCluster builds the e2e images' stand-ins and cluster DNS's, serves
// them as registry.k8s.io on 127.0.0.1, and starts the cluster with them
// imported on every node (so IfNotPresent never pulls); undo gets how to
// take each part down again.
func startCluster(ctx context.Context, o options, undo *[]func()) (*harness, error) {
	r := &harness{}
	k8s := func(name string) string { return filepath.Join(o.k8sBin, name) }
	tars, err := images.BuildConformanceImages(ctx, images.ConformanceInputs{
		Agnhost: k8s("agnhost"),
		Nnp:     k8s("nnp"),
		Pause:   filepath.Join(o.nodeletBin, "nodelet-pause"),
		Shell:   "/bin/bash-static",
	}, k8s("images"))
	if err != nil {
		return nil, fmt.Errorf("e2e image stand-ins: %w", err)
	}
	dns, err := images.BuildCoreDNS(ctx, k8s("coredns"), k8s("images"))
	if err != nil {
		return nil, fmt.Errorf("cluster DNS image: %w", err)
	}
	tars = append(tars, dns)
	for _, t := range tars {
		r.images = append(r.images, t.Ref)
	}
	// The registry listens on the bridge's host address, which exists once
	// the cluster has made the bridge and before any node pulls.
	hostsDir := filepath.Join(o.work, "registry-hosts")
	serve := func(ctx context.Context) error {
		reg, err := serveRegistry(ctx, cluster.HostIP, tars)
		if err != nil {
			return err
		}
		*undo = append(*undo, reg.close)
		log("registry.k8s.io stand-in at %s with %d images", reg.addr, len(tars))
		return reg.writeHosts(hostsDir)
	}

	r.c, err = cluster.Start(ctx, cluster.Options{
		Nodes:           o.nodes,
		HostRootDir:     o.dra,
		APIServerArgs:   o.apiServerArgs(),
		Agent:           cluster.Agent(o.agent),
		ContainerdMajor: o.containerd,
		Work:            filepath.Join(o.work, "cluster"),
		Bins: cluster.Binaries{
			Nodelet:               o.nodeletBin,
			KubeControllerManager: k8s("kube-controller-manager"),
			KubeScheduler:         k8s("kube-scheduler"),
			KubeProxy:             k8s("kube-proxy"),
			Kubelet:               k8s("kubelet"),
		},
		Images:             tars,
		RegistryConfigPath: hostsDir,
		OnBridge:           serve,
		DNSImage:           dns.Ref,
		LockWait:           o.wait,
		Log:                log,
	})
	if err != nil {
		return nil, err
	}
	*undo = append(*undo, r.c.Stop)
	r.cp = r.c.CP
	for _, n := range r.c.Nodes {
		log("%s: %s at %s, containerd %s, logs in %s", n.Name, o.agent, n.IP, n.Containerd.Address, n.Dir)
	}
	log("control plane %s (logs in %s)", r.cp.URL, r.cp.Dir)
	return r, nil
}

// phase is one run of the suite: a selection and how many specs at once.
type phase struct {
	name         string
	focus, skip  string
	procs        int
	report, logf string
}

// runSuite runs the e2e binary against the cluster, its output to p.logf.
func runSuite(ctx context.Context, o options, r *harness, p phase) error {
	f, err := os.Create(p.logf)
	if err != nil {
		return err
	}
	defer f.Close()
	suiteArgs := append([]string{
		"--provider=local",
		"--kubeconfig=" + r.cp.AdminKubeconfig,
		"--kubectl-path=" + r.cp.Kubectl,
		"--report-dir=" + filepath.Dir(p.report),
		"--disable-log-dump",
	}, o.extraE2EArgs...)
	var cmd *exec.Cmd
	if p.procs == 1 {
		cmd = exec.CommandContext(ctx, o.e2e, append([]string{
			"--ginkgo.focus=" + p.focus,
			"--ginkgo.skip=" + p.skip,
			"--ginkgo.json-report=" + p.report,
			"--ginkgo.timeout=" + o.timeout.String(),
			"--ginkgo.no-color",
			"--ginkgo.v",
		}, suiteArgs...)...)
	} else {
		// The ginkgo runner spreads the specs over processes and merges
		// their reports into one.
		cmd = exec.CommandContext(ctx, filepath.Join(o.k8sBin, "ginkgo"), append([]string{
			"--procs=" + strconv.Itoa(p.procs),
			"--focus=" + p.focus,
			"--skip=" + p.skip,
			"--output-dir=" + filepath.Dir(p.report),
			"--json-report=" + filepath.Base(p.report),
			"--timeout=" + o.timeout.String(),
			"--no-color",
			"-v",
			o.e2e, "--",
		}, suiteArgs...)...)
	}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(f, newProgress(os.Stdout)), f
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.cp.AdminKubeconfig)
	// Its own process group: the ginkgo runner's suite processes are
	// interrupted with it and never outlive the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return nil // failed specs: the report says which
	}
	return err
}
