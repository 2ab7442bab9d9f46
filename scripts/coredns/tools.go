//go:build tools

// Package tools keeps CoreDNS's main package and everything it links in this
// module's go.mod and go.sum, so that `go build github.com/coredns/coredns`
// here is reproducible and offline after the first download. Never built.
package tools

import (
	_ "github.com/coredns/coredns"
)
