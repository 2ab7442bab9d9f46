package status

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodelet/nodelet/internal/testenv"
)

// cp is the real kube-apiserver + etcd every API test runs against,
// started once for the test binary. Its node identity is node-1.
var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		// A child process of the SIGKILL test: run nodelet-status.
		os.Exit(runStatusHelper())
	}
	var stop func()
	var err error
	cp, stop, err = testenv.StartControlPlane("node-1")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}
