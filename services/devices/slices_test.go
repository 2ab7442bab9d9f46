package devices

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// sharedControlPlane is kube-apiserver and etcd, started once for the
// package with the node identity node-a.
var sharedControlPlane = testenv.SharedControlPlane{NodeName: "node-a"}

func controlPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	return sharedControlPlane.Get(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	sharedControlPlane.Stop()
	os.Exit(code)
}

// servePlugin serves gRPC (no service is needed: the connection is what
// counts) on a unix socket until the returned stop.
func servePlugin(t *testing.T, sock string) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return srv.Stop
}

// The node's ResourceSlices of a DRA driver with no connected plugin go
// after the kubelet's wiping delay, those of connected drivers and of other
// nodes stay (the kubelet's DRAPluginManager sync and wipeResourceSlices),
// against the real API with the node's own identity.
func TestWipeResourceSlices(t *testing.T) {
	testenv.RequiresRoot(t) // the control plane's binaries
	cp := controlPlane(t)
	admin, node := cp.AdminClient(t), cp.NodeClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	slice := func(nodeName, driver string) {
		t.Helper()
		s := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: nodeName + "-" + driver + "-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &nodeName,
				Pool:    resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "dev-0"}}},
		}
		if _, err := admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	left := func() []string {
		l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range l.Items {
			out = append(out, *s.Spec.NodeName+"/"+s.Spec.Driver)
		}
		sort.Strings(out)
		return out
	}
	for _, s := range [][2]string{{"node-a", "x.example.com"}, {"node-a", "y.example.com"}, {"node-a", "z.example.com"}, {"node-b", "x.example.com"}} {
		slice(s[0], s[1])
	}

	log := slog.New(slog.DiscardHandler)
	clk := testingclock.NewFakeClock(time.Now())
	p := newDRAPlugins(log)
	w := newSliceWiper(ctx, log, "node-a", func() kubernetes.Interface { return node }, p.usable)
	w.clock = clk
	p.wiper = w
	defer p.close()
	dir := t.TempDir()
	register := func(driver string) string {
		t.Helper()
		sock := filepath.Join(dir, driver+".sock")
		info := &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: driver, Endpoint: sock,
			SupportedVersions: []string{drapb.DRAPluginService}}
		if err := p.Register(ctx, filepath.Join(dir, driver+"-reg.sock"), info); err != nil {
			t.Fatal(err)
		}
		return sock
	}
	usable := func(want ...string) {
		t.Helper()
		sort.Strings(want)
		eventually.State(t, 20*time.Second, "usable drivers", func() (bool, string) {
			got := p.usable()
			sort.Strings(got)
			return slices.Equal(got, want), "usable " + strings.Join(got, ",")
		})
	}
	// step passes the wiping delay once a wipe is waiting for it.
	step := func() {
		t.Helper()
		eventually.True(t, 10*time.Second, "a wipe waits", clk.HasWaiters)
		clk.Step(wipingDelay)
	}
	wantLeft := func(want ...string) {
		t.Helper()
		eventually.State(t, 20*time.Second, "slices left", func() (bool, string) {
			got := left()
			return slices.Equal(got, want), strings.Join(got, ",")
		})
	}

	// x's plugin is up; y never registers; z registers, its plugin not up.
	stopX := servePlugin(t, register("x.example.com"))
	zSock := register("z.example.com")
	usable("x.example.com")
	w.start()

	// z's plugin comes up inside the delay: its wipe is called off.
	servePlugin(t, zSock)
	usable("x.example.com", "z.example.com")

	// The start's wipe: y's slice goes, x's and z's (connected) stay, as
	// does the other node's.
	step()
	wantLeft("node-a/x.example.com", "node-a/z.example.com", "node-b/x.example.com")

	// x's plugin goes: its slice goes after the delay, not before.
	stopX()
	usable("z.example.com")
	if got := left(); !slices.Contains(got, "node-a/x.example.com") {
		t.Fatalf("x's slice went before the delay: %v", got)
	}
	step()
	wantLeft("node-a/z.example.com", "node-b/x.example.com")
}
