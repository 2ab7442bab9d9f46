package testenv

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
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
func (cp *ControlPlane) StartControllers(controllerManagerBin, schedulerBin string) (_ *Controllers, err error) {
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
	pki := filepath.Join(cp.Dir, "pki")
	c.controllerManager, err = startProc(filepath.Join(cp.Dir, "kube-controller-manager.log"), controllerManagerBin,
		append(common(ports[0], "kcm-certs"),
			"--controllers=*,-node-ipam-controller",
			"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
			"--root-ca-file="+filepath.Join(pki, "ca.crt"),
			"--cluster-signing-cert-file="+filepath.Join(pki, "ca.crt"),
			"--cluster-signing-key-file="+filepath.Join(pki, "ca.key"),
			"--use-service-account-credentials=true",
			"--service-cluster-ip-range="+ServiceClusterIPRange,
		)...)
	if err != nil {
		return nil, err
	}
	c.scheduler, err = startProc(filepath.Join(cp.Dir, "kube-scheduler.log"), schedulerBin, common(ports[1], "scheduler-certs")...)
	if err != nil {
		return nil, err
	}
	// Both serve /healthz with a self-signed certificate of their own.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check of our own child
	}}
	for i, p := range []*proc{c.controllerManager, c.scheduler} {
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
