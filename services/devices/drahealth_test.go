package devices

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
)

func healthOf(pool, device string, h drahealthv1.HealthStatus, timeout int64, msg string) *drahealthv1.DeviceHealth {
	return &drahealthv1.DeviceHealth{Device: &drahealthv1.DeviceIdentifier{PoolName: pool, DeviceName: device}, Health: h,
		HealthCheckTimeoutSeconds: timeout, Message: msg}
}

// TestHealthCache is the kubelet's healthInfoCache on an injected clock:
// the timeouts (the driver's, else 30s, a negative one ignored), Unknown
// once a report is older, an unreported device dropped once expired, the
// message cut to the API's length, and the end of a replaced stream not
// clearing what its successor reported.
func TestHealthCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newHealthCache(slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return now }
	health := func(device string) (string, string) {
		t.Helper()
		rec, _ := c.snapshot()
		d := rec.Device("drv", "pool", device)
		if d == nil {
			return "", ""
		}
		return d.Health, d.Message
	}
	long := strings.Repeat("x", 2000)
	if !c.update("drv", 1, []*drahealthv1.DeviceHealth{
		healthOf("pool", "a", drahealthv1.HealthStatus_HEALTHY, 0, ""),
		healthOf("pool", "b", drahealthv1.HealthStatus_UNHEALTHY, 5, long),
		healthOf("pool", "c", drahealthv1.HealthStatus_HEALTHY, -3, ""),
	}) {
		t.Fatal("a first report changed nothing")
	}
	if _, next := c.snapshot(); !next.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("next expiry %v, want b's after 5s", next)
	}
	if h, m := health("b"); h != "Unhealthy" || len(m) != 1024 || !strings.HasSuffix(m, "...") {
		t.Fatalf("b: %s, message of %d bytes", h, len(m))
	}
	now = now.Add(6 * time.Second)
	if h, m := health("b"); h != "Unknown" || m != "" {
		t.Fatalf("b after its 5s: %s %q, want Unknown", h, m)
	}
	if h, _ := health("c"); h != "Healthy" {
		t.Fatalf("c (negative timeout: 30s) after 6s: %s", h)
	}
	// The same report again changes nothing; a report without b, once b
	// expired, drops it.
	if c.update("drv", 1, []*drahealthv1.DeviceHealth{healthOf("pool", "a", drahealthv1.HealthStatus_HEALTHY, 0, ""),
		healthOf("pool", "c", drahealthv1.HealthStatus_HEALTHY, -3, "")}) != true {
		t.Fatal("b expired and unreported, not dropped")
	}
	if h, _ := health("b"); h != "" {
		t.Fatalf("b still there: %s", h)
	}
	if c.update("drv", 1, []*drahealthv1.DeviceHealth{healthOf("pool", "a", drahealthv1.HealthStatus_HEALTHY, 0, "")}) {
		t.Fatal("the same report changed something")
	}
	// A new registration's stream reported; the old stream's end leaves it.
	c.update("drv", 2, []*drahealthv1.DeviceHealth{healthOf("pool", "a", drahealthv1.HealthStatus_UNHEALTHY, 0, "")})
	c.clearDriver("drv", 1)
	if h, _ := health("a"); h != "Unhealthy" {
		t.Fatalf("a after the old stream ended: %q", h)
	}
	c.clearDriver("drv", 2)
	if h, _ := health("a"); h != "" {
		t.Fatalf("a after its stream ended: %q", h)
	}
}
