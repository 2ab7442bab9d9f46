package plugins_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

const nodeName = "e2e-node"

var (
	ctrd   *testenv.Containerd
	cdiDir string
	cp     *testenv.ControlPlane
)

func TestMain(m *testing.M) {
	// A CSI test driver started by csitest.Start is this binary too.
	csitest.MainIfDriver()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, stop, err := e2e.Setup(nodeName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	ctrd, cdiDir, cp = env.Ctrd, env.CDIDir, env.CP
	return m.Run()
}
