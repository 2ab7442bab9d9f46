package e2e_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
)

const nodeName = "e2e-node"

var (
	binDir string
	ctrd   *testenv.Containerd
	cp     *testenv.ControlPlane
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, stop, err := e2e.Setup(nodeName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	binDir, ctrd, cp = env.BinDir, env.Ctrd, env.CP
	return m.Run()
}
