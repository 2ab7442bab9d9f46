package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nodelet/nodelet/internal/containerd"
)

// ContainerdEnv names the variable that picks the tests' containerd: "1"
// for Debian's 1.6, "" or "2" for containerd 2.x (the default, as
// scripts/setup.sh's).
const ContainerdEnv = "NODELET_TEST_CONTAINERD"

// ContainerdMajor is the containerd major version the tests run against,
// from NODELET_TEST_CONTAINERD: 2 (containerd 2.x) unless it says 1.
func ContainerdMajor() (int, error) {
	switch v := strings.TrimSpace(os.Getenv(ContainerdEnv)); v {
	case "1", "1.6":
		return 1, nil
	case "", "2", "2.x", containerd.Version2, strings.TrimPrefix(containerd.Version2, "v"):
		return 2, nil
	default:
		return 0, fmt.Errorf("testenv: %s=%q: want 1 (Debian's containerd 1.6) or 2 (containerd %s)", ContainerdEnv, v, containerd.Version2)
	}
}

var containerd2 struct {
	once sync.Once
	bins containerd.Binaries2
	err  error
}

// Containerd2 returns the containerd 2.x build (containerd, its runc shim
// and ctr), building it with `scripts/containerd2.sh build` the first time
// (about two minutes; then cached in ${NODELET_CACHE:-$HOME/.cache/nodelet}).
// The build's progress goes to stderr.
func Containerd2() (containerd.Binaries2, error) {
	containerd2.once.Do(func() {
		containerd2.bins, containerd2.err = buildContainerd2()
	})
	return containerd2.bins, containerd2.err
}

func buildContainerd2() (containerd.Binaries2, error) {
	if b := containerd.Cached2(); b.Present() {
		return b, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return containerd.Binaries2{}, err
	}
	script := filepath.Join(root, "scripts", "containerd2.sh")
	vars, out, err := scriptVars(root, "containerd2.sh", "build")
	if err != nil {
		return containerd.Binaries2{}, err
	}
	b := containerd.Binaries2{Containerd: vars["CONTAINERD"], Shim: vars["CONTAINERD_SHIM"], Ctr: vars["CTR"]}
	if b.Containerd != "" {
		b.Dir = filepath.Dir(b.Containerd)
	}
	if !b.Present() {
		return containerd.Binaries2{}, fmt.Errorf("%s build did not print the paths of containerd, its shim and ctr; output:\n%s", script, out)
	}
	return b, nil
}
