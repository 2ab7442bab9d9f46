// Package testenv starts real parts (control plane, containerd, bus) for tests.
//
// Nothing here is a fake: each helper runs the real program on loopback in a
// temporary directory, so parallel test binaries do not collide, and kills it
// when the test binary exits. A missing program is built or installed, never a
// reason to skip.
//
// The control plane (etcd + kube-apiserver, see StartControlPlane) is meant to
// be started once per test binary from TestMain:
//
//	var cp *testenv.ControlPlane
//
//	func TestMain(m *testing.M) {
//		var stop func()
//		var err error
//		cp, stop, err = testenv.StartControlPlane("node-1")
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
//
//	func TestSomething(t *testing.T) {
//		ns := cp.Namespace(t)       // fresh namespace, deleted at cleanup
//		node := cp.NodeClient(t)    // acts as system:node:node-1
//		admin := cp.AdminClient(t)  // system:masters
//		...
//	}
package testenv
