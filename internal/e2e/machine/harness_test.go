package machine_test

import (
	"os"
	"testing"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
)

// nodeName is the control plane's node: the one a machine's nodelet runs
// as when it is not joined by kubeadm under a name of its own.
const nodeName = "e2e-machine"

var (
	binDir string
	ctrd   *testenv.Containerd
	cp     *testenv.ControlPlane
)

func TestMain(m *testing.M) {
	// A machine's containerd is this binary too (testenv.StartMachineContainerd).
	testenv.MainIfMachineContainerd()
	os.Exit(e2e.Main(m, nodeName, func(env e2e.Env) { binDir, ctrd, cp = env.BinDir, env.Ctrd, env.CP }))
}
