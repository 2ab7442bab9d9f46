package testenv

import (
	"sync"
	"testing"
)

// SharedControlPlane is one control plane for a whole test binary, started
// by the first test that asks for it (so a `-run` that selects none of
// them starts none) and stopped by TestMain:
//
//	var controlPlane = testenv.SharedControlPlane{NodeName: "node-1"}
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		controlPlane.Stop()
//		os.Exit(code)
//	}
//
// A failed start fails every test that asks, with the same error.
type SharedControlPlane struct {
	// NodeName is StartControlPlane's: the node identity its kubeconfig
	// has ("" means "testnode").
	NodeName string

	once sync.Once
	cp   *ControlPlane
	stop func()
	err  error
}

// Get starts the control plane at the first call and returns it.
func (s *SharedControlPlane) Get(t testing.TB) *ControlPlane {
	t.Helper()
	s.once.Do(func() { s.cp, s.stop, s.err = StartControlPlane(s.NodeName) })
	if s.err != nil {
		t.Fatalf("control plane: %v", s.err)
	}
	return s.cp
}

// Stop stops the control plane if it was started.
func (s *SharedControlPlane) Stop() {
	if s.stop != nil {
		s.stop()
	}
}
