// Package plugins runs whole nodes with what plugs into a node: device
// plugins (the Kubernetes sample plugin as a DaemonSet too), DRA drivers
// (the e2e suite's test driver) and a CSI driver. Its own test binary
// beside internal/e2e's (they share internal/e2e's harness).
// It holds only tests.
package plugins
