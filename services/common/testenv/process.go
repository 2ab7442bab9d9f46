package testenv

import (
	"bytes"
	"fmt"
	"os/exec"
	"sync"
)

// Buffer collects a child process's output while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// BuildBinaries builds the given packages of the module (default every
// ./cmd/... binary) into dir, for tests that run nodelet as processes.
func BuildBinaries(dir string, pkgs ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd/..."}
	}
	build := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	return nil
}
