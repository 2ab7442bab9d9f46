package testenv

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Controllers are a kube-controller-manager and a kube-scheduler running
// against a ControlPlane, as a full cluster has them: service accounts, the
// kube-root-ca.crt ConfigMaps, namespace deletion, garbage collection,
// ReplicaSets and Jobs; the scheduler binds pods created without a node.
type Controllers struct {
	controllerManager, scheduler *proc
}

// StartControllers starts kube-controller-manager and kube-scheduler (binaries
// of the control plane's version, e.g. from `scripts/controlplane.sh
// build-conformance`) as cluster admin on loopback and waits until both
// answer /healthz. The node IPAM controller is off: nodelet takes its pod
// range from its own configuration. Stop them before the control plane.
func (cp *ControlPlane) StartControllers(controllerManagerBin, schedulerBin string) (*Controllers, error) {
	return cp.StartControllersWith(ControllersOptions{ControllerManager: controllerManagerBin, Scheduler: schedulerBin})
}

// ControllersOptions choose what StartControllersWith runs.
type ControllersOptions struct {
	// ControllerManager and Scheduler are the binaries; an empty Scheduler
	// runs no scheduler.
	ControllerManager, Scheduler string
	// Controllers is kube-controller-manager's --controllers; empty is
	// "*,-node-ipam-controller". A test on the shared e2e control plane
	// that needs only the CSR controllers names them ("csrapproving",
	// "csrsigning"), so that e.g. the node lifecycle controller does not
	// taint other tests' nodes.
	Controllers []string
	// ClusterSigningDuration is --cluster-signing-duration, the lifetime of
	// the certificates the csrsigning controller issues; 0 keeps the
	// default (a year).
	ClusterSigningDuration time.Duration
	// ClusterCIDR turns on the node IPAM controller (when Controllers is
	// empty: every controller then runs) with this --cluster-cidr, handing
	// each node a /24 of it as spec.podCIDR, as kubeadm's
	// networking.podSubnet does. Default: "" (no IPAM).
	ClusterCIDR string
}

// StartControllersWith is StartControllers with options.
func (cp *ControlPlane) StartControllersWith(o ControllersOptions) (_ *Controllers, err error) {
	c := &Controllers{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	// What both take: cluster admin, serving on loopback, alone.
	common := func(port int, certDir string) []string {
		return []string{
			"--kubeconfig=" + cp.AdminKubeconfig,
			"--authentication-kubeconfig=" + cp.AdminKubeconfig,
			"--authorization-kubeconfig=" + cp.AdminKubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(cp.Dir, certDir),
			"--leader-elect=false",
		}
	}
	controllers := "*,-node-ipam-controller"
	if o.ClusterCIDR != "" {
		controllers = "*"
	}
	if len(o.Controllers) > 0 {
		controllers = strings.Join(o.Controllers, ",")
	}
	pki := filepath.Join(cp.Dir, "pki")
	args := append(common(ports[0], "kcm-certs"),
		"--controllers="+controllers,
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--root-ca-file="+filepath.Join(pki, "ca.crt"),
		"--cluster-signing-cert-file="+filepath.Join(pki, "ca.crt"),
		"--cluster-signing-key-file="+filepath.Join(pki, "ca.key"),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range="+ServiceClusterIPRange,
	)
	if o.ClusterCIDR != "" {
		args = append(args, "--allocate-node-cidrs=true", "--cluster-cidr="+o.ClusterCIDR, "--node-cidr-mask-size=24",
			"--configure-cloud-routes=false")
	}
	if o.ClusterSigningDuration > 0 {
		args = append(args, "--cluster-signing-duration="+o.ClusterSigningDuration.String())
	}
	c.controllerManager, err = startProc(filepath.Join(cp.Dir, "kube-controller-manager.log"), o.ControllerManager, args...)
	if err != nil {
		return nil, err
	}
	procs := []*proc{c.controllerManager}
	if o.Scheduler != "" {
		c.scheduler, err = startProc(filepath.Join(cp.Dir, "kube-scheduler.log"), o.Scheduler, common(ports[1], "scheduler-certs")...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, c.scheduler)
	}
	// Both serve /healthz with a self-signed certificate of their own.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check of our own child
	}}
	for i, p := range procs {
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[i])
		if err := waitFor(2*time.Minute, p, func() bool { return httpGetOK(hc, url, "ok") }); err != nil {
			return nil, fmt.Errorf("testenv: %s: %w", filepath.Base(p.cmd.Path), err)
		}
	}
	return c, nil
}

// Stop stops the scheduler and the controller manager; safe to call twice.
func (c *Controllers) Stop() {
	if c == nil {
		return
	}
	c.scheduler.stop()
	c.controllerManager.stop()
}

// Tool returns the path of one of `scripts/controlplane.sh tools` (e.g.
// kube-controller-manager), built or taken from the cache.
func Tool(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	vars, out, err := scriptVars(root, "controlplane.sh", "tools", name)
	if err != nil {
		return "", err
	}
	if v := vars[strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(name))]; v != "" {
		return v, nil
	}
	return "", fmt.Errorf("controlplane.sh tools %s printed no path:\n%s", name, out)
}
