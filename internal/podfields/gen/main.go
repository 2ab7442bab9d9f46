// Command gen writes docs/pod-fields.md from the field ledger; run by
// go generate in internal/podfields.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodelet/nodelet/internal/podfields/docgen"
)

func main() {
	root := filepath.Join("..", "..")
	if err := docgen.Write(root, filepath.Join(root, "docs", "pod-fields.md")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
