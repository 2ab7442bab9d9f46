package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeletcompat"
	"github.com/nodelet/nodelet/internal/version"
)

// Run as kubelet (a link to nodelet) with what kubeadm's drop-in passes,
// nodelet writes the mapped configuration, which nodelet's loader takes,
// and execs the supervisor (nodeletd as nodelet-supervisor) with it; a
// stand-in nodeletd here records its arguments.
func TestKubeletLinkStartsSupervisor(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodelet")
	if err := os.Link(nodeletBin, bin); err != nil {
		t.Skipf("cannot link the nodelet binary: %v", err)
	}
	if err := os.Symlink("nodelet", filepath.Join(dir, "kubelet")); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "supervisor-args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + record + "\n"
	if err := os.WriteFile(filepath.Join(dir, "nodeletd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "var-lib-kubelet")
	kubeadmConfig, _ := filepath.Abs("../../internal/kubeletcompat/testdata/kubeadm-config.yaml")
	cmd := exec.Command(filepath.Join(dir, "kubelet"),
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config="+kubeadmConfig, "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
		"--pod-infra-container-image=registry.k8s.io/pause:3.10", "--root-dir="+root, "--cert-dir="+root+"/pki",
		// As on a cgroup v1 host (this one may be): the kubelet's
		// failCgroupV1 would refuse it otherwise.
		"--fail-cgroupv1=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubelet: %v\n%s", err, out)
	}
	args, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, kubeletcompat.ConfigName)
	if got, want := strings.Fields(string(args)), []string{"--config", path}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("supervisor started with %q, want %q", got, want)
	}
	c, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Node.StateDir != root || c.Node.Kubeconfig != "/etc/kubernetes/kubelet.conf" || c.Runtime.CgroupDriver != "systemd" ||
		c.Sources.StaticPodPath != "/etc/kubernetes/manifests" {
		t.Errorf("configuration: node %+v, cgroupDriver %s, staticPodPath %s", c.Node, c.Runtime.CgroupDriver, c.Sources.StaticPodPath)
	}

	out, err := exec.Command(bin, "kubelet", "--version").Output()
	if err != nil || string(out) != "Kubernetes "+version.Kubelet()+"\n" {
		t.Errorf("nodelet kubelet --version: %q %v", out, err)
	}
	out, err = exec.Command(bin, "kubelet", "--no-such-flag").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown flag: --no-such-flag") {
		t.Errorf("an unknown flag: %q %v", out, err)
	}
}
