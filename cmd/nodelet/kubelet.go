package main

import (
	"os"

	"github.com/nodelet/nodelet/internal/kubeletcompat"
)

func init() {
	commands = append(commands, command{"kubelet", "run the node from the kubelet's flags and KubeletConfiguration (docs/kubelet-compat.md)", runKubelet})
	// Installed as /usr/bin/kubelet (a link to nodelet), kubeadm's
	// kubelet.service runs nodelet with the kubelet's command line.
	linkNames["kubelet"] = runKubelet
	linkNames["nodelet-kubelet"] = runKubelet
}

// runKubelet maps the kubelet's command line onto <root-dir>/nodelet.yaml
// and becomes `nodelet up --config` with it.
func runKubelet(args []string) int {
	return kubeletcompat.Main(args, kubeletcompat.Options{Stdout: os.Stdout, Stderr: os.Stderr, Up: runUp})
}
