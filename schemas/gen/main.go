// Command gen writes the JSON Schema documents of every bus message type.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodelet/nodelet/schemas"
)

func main() {
	out := flag.String("out", "v1", "directory to write the schema files into")
	flag.Parse()
	docs, err := schemas.JSONSchemas()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for name, b := range docs {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
