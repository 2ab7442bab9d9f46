//go:build tools

// Package tools keeps the commands scripts/containerd2.sh builds in this
// module's go.mod and go.sum. Never built.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
