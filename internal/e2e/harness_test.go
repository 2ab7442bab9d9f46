package e2e_test

import (
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
	os.Exit(e2e.Main(m, nodeName, func(env e2e.Env) { binDir, ctrd, cp = env.BinDir, env.Ctrd, env.CP }))
}
