package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BinaryPaths are the programs a control plane runs.
type BinaryPaths struct {
	KubeAPIServer, Kubectl, Etcd string
}

var binaries struct {
	once  sync.Once
	paths BinaryPaths
	err   error
}

// Binaries returns the paths of kube-apiserver, kubectl and etcd, building
// the first two (or reusing them from the cache) with
// `scripts/controlplane.sh build`. The build's progress goes to stderr.
func Binaries() (BinaryPaths, error) {
	binaries.once.Do(func() {
		binaries.paths, binaries.err = buildBinaries()
	})
	return binaries.paths, binaries.err
}

func buildBinaries() (BinaryPaths, error) {
	root, err := RepoRoot()
	if err != nil {
		return BinaryPaths{}, err
	}
	script := filepath.Join(root, "scripts", "controlplane.sh")
	vars, out, err := scriptVars(root, "controlplane.sh", "build")
	if err != nil {
		return BinaryPaths{}, err
	}
	p := BinaryPaths{KubeAPIServer: vars["KUBE_APISERVER"], Kubectl: vars["KUBECTL"], Etcd: vars["ETCD"]}
	for name, path := range map[string]string{"kube-apiserver": p.KubeAPIServer, "kubectl": p.Kubectl, "etcd": p.Etcd} {
		if path == "" {
			return BinaryPaths{}, fmt.Errorf("%s build did not print the path of %s; output:\n%s", script, name, out)
		}
		if _, err := os.Stat(path); err != nil {
			return BinaryPaths{}, fmt.Errorf("%s build: %s: %w", script, name, err)
		}
	}
	return p, nil
}

// RepoRoot returns the root of the nodelet repository: the first directory,
// walking up from the working directory, that has a go.mod and
// scripts/controlplane.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "scripts", "controlplane.sh")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: repository root (go.mod with scripts/controlplane.sh) not found above the working directory")
		}
		dir = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// scriptVars runs `scripts/<script> args…` from the repository's root
// (its progress to stderr) and reads the KEY=VALUE lines it prints, such
// as the paths of what it built; out is all it printed.
func scriptVars(root, script string, args ...string) (vars map[string]string, out []byte, err error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "scripts", script)}, args...)...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	if out, err = cmd.Output(); err != nil {
		return nil, out, fmt.Errorf("%s %s: %w", filepath.Join(root, "scripts", script), strings.Join(args, " "), err)
	}
	vars = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			vars[k] = v
		}
	}
	return vars, out, nil
}
