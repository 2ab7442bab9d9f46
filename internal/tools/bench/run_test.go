package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The default bound on a burst or teardown grows with the burst past 100
// pods; one given is kept.
func TestTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		set  time.Duration
		n    int
		want time.Duration
	}{
		{0, 1, DefaultTimeout},
		{0, 100, DefaultTimeout},
		{0, 110, 330 * time.Second},
		{time.Minute, 110, time.Minute},
	} {
		o := Options{Timeout: tc.set}
		if got := o.timeoutFor(tc.n); got != tc.want {
			t.Errorf("Timeout %v, N=%d: %v, want %v", tc.set, tc.n, got, tc.want)
		}
	}
}

// Every bench process has a cgroup root of its own, and its nodes and
// floor pods use it: another bench's nodelet-runtime cleans up the pod
// cgroups under its root that it does not know.
func TestCgroupRootIsThisProcesss(t *testing.T) {
	if want := fmt.Sprintf("/nodelet-bench-%d", os.Getpid()); CgroupRoot != want {
		t.Fatalf("CgroupRoot %s, want %s", CgroupRoot, want)
	}
	cfg := nodeConfig("/d", "127.0.0.1:1", "127.0.0.1:2", "3", "/bin", &runtimeEnv{}, 2)
	if !strings.Contains(cfg, "cgroupRoot: "+CgroupRoot+"\n") {
		t.Fatalf("node config without the bench's cgroup root:\n%s", cfg)
	}
}
