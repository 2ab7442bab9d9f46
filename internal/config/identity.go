package config

import "fmt"

// NodeKubeconfig is the node's identity towards kube-apiserver:
// node.kubeconfig, else the deprecated sources.kubeconfig; "" on a
// standalone node. Daemons build their clients through
// internal/kubeclient, which reads it.
func (c *Config) NodeKubeconfig() string {
	if c.Node.Kubeconfig != "" {
		return c.Node.Kubeconfig
	}
	return c.Sources.Kubeconfig
}

// Deprecations lists what the configuration uses that is deprecated, one
// message each, naming the key to use instead. The daemon frame logs them
// once at start.
func (c *Config) Deprecations() []string {
	var out []string
	if c.Sources.Kubeconfig != "" {
		out = append(out, "sources.kubeconfig is deprecated: use node.kubeconfig (the node's identity for every daemon)")
	}
	return out
}

// validateIdentity checks node.kubeconfig, node.bootstrapKubeconfig,
// node.rotateCertificates and server.serverTLSBootstrap together.
func (c *Config) validateIdentity() error {
	for _, p := range []struct{ key, v string }{
		{"node.kubeconfig", c.Node.Kubeconfig},
		{"node.bootstrapKubeconfig", c.Node.BootstrapKubeconfig},
		{"sources.kubeconfig", c.Sources.Kubeconfig},
	} {
		if err := absPath(p.key, p.v, true); err != nil {
			return err
		}
	}
	if c.Node.Kubeconfig != "" && c.Sources.Kubeconfig != "" && c.Node.Kubeconfig != c.Sources.Kubeconfig {
		return &Error{Key: "sources.kubeconfig", Problem: fmt.Sprintf("%q differs from node.kubeconfig %q: set node.kubeconfig alone (sources.kubeconfig is deprecated)",
			c.Sources.Kubeconfig, c.Node.Kubeconfig)}
	}
	kc := c.NodeKubeconfig()
	if c.Node.BootstrapKubeconfig != "" && kc == "" {
		return &Error{Key: "node.bootstrapKubeconfig", Problem: "needs node.kubeconfig: the path where the node writes the kubeconfig of its bootstrapped certificate"}
	}
	if c.Node.BootstrapKubeconfig != "" && c.Node.BootstrapKubeconfig == kc {
		return &Error{Key: "node.bootstrapKubeconfig", Problem: "must differ from node.kubeconfig, which the node writes"}
	}
	if c.Node.RotateCertificates && kc == "" {
		return &Error{Key: "node.rotateCertificates", Problem: "needs node.kubeconfig (a standalone node has no certificate to rotate)"}
	}
	if c.Server.ServerTLSBootstrap {
		if kc == "" {
			return &Error{Key: "server.serverTLSBootstrap", Problem: "needs node.kubeconfig: the serving certificate is requested from kube-apiserver"}
		}
		if c.Server.TLSCertFile != "" {
			return &Error{Key: "server.serverTLSBootstrap", Problem: "excludes server.tlsCertFile/tlsPrivateKeyFile: the serving certificate comes from a CSR"}
		}
	}
	return nil
}
