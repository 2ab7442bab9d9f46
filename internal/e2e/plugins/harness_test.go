package plugins_test

import (
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
	os.Exit(e2e.Main(m, nodeName, func(env e2e.Env) { ctrd, cdiDir, cp = env.Ctrd, env.CDIDir, env.CP }))
}
