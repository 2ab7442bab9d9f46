// Package faults runs whole nodes through what breaks them in production:
// daemons and the bus killed under churn, kube-apiserver stopped, a watch
// expired, the state dir's and the image filesystem full. Its own test
// binary beside internal/e2e's (they share internal/e2e's harness).
// It holds only tests.
package faults
