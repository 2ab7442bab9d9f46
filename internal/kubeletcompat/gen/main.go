// Command gen writes docs/kubelet-compat.md (go generate ./internal/kubeletcompat/).
package main

import (
	"fmt"
	"os"

	"github.com/nodelet/nodelet/internal/kubeletcompat"
)

func main() {
	if err := os.WriteFile(os.Args[1], []byte(kubeletcompat.Markdown()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
