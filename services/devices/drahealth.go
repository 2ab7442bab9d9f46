package devices

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's health constants (cm/dra healthinfo.go): a device's
// report holds for the driver's timeout, else DefaultHealthTimeout; a
// driver's report keeps at most maxDevicesPerDriver devices.
const (
	defaultHealthTimeout = 30 * time.Second
	maxDevicesPerDriver  = 16384
	// healthRetryPeriod is the kubelet's wait.UntilWithContext period
	// between attempts at a driver's NodeWatchResources stream.
	healthRetryPeriod = 5 * time.Second
)

// healthServicesSupported are the DRAResourceHealth services nodelet
// speaks, most recent first (the kubelet's
// healthServicesSupportedByKubelet). The service is optional: a driver
// that does not list one in its registration is not watched.
var healthServicesSupported = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

// pickHealthService is the kubelet's: the most recent health service both
// sides speak, "" when the driver offers none.
func pickHealthService(services []string) string {
	for _, s := range healthServicesSupported {
		for _, o := range services {
			if o == s {
				return s
			}
		}
	}
	return ""
}

// watchResources opens the driver's NodeWatchResources stream in v1
// terms (v1alpha1 through the kubelet's wrapper): DRAPlugin's
// NodeWatchResources.
func watchResources(ctx context.Context, conn *grpc.ClientConn, service string) (drahealthv1.DRAResourceHealth_NodeWatchResourcesClient, error) {
	if service == drahealthv1alpha1.DRAResourceHealthService {
		return drahealthv1.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(conn)}.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	}
	return drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
}

// deviceHealth is one device's last report (the kubelet's
// state.DeviceHealth).
type deviceHealth struct {
	health      corev1.ResourceHealthStatus
	message     string
	lastUpdated time.Time
	timeout     time.Duration
}

// healthCache is the kubelet's healthInfoCache: each driver's devices'
// last report, by "pool/device". The daemon publishes what it says at
// each change and when a report expires (the kubelet computes that when
// it builds a pod's status; here nodelet-status reads the result).
type healthCache struct {
	log     *slog.Logger
	now     func() time.Time
	mu      sync.Mutex
	drivers map[string]map[string]deviceHealth
	// streams: which watch of each driver reported last, so that the
	// stream of a driver's replaced registration, ending after the new
	// one began, does not clear what the new one reported.
	streams map[string]uint64
	lastID  uint64
	changed chan struct{}
}

func newHealthCache(log *slog.Logger) *healthCache {
	return &healthCache{log: log, now: time.Now, drivers: map[string]map[string]deviceHealth{}, streams: map[string]uint64{}, changed: make(chan struct{}, 1)}
}

func (c *healthCache) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// truncateHealthMessage is the kubelet's: the API's 1024 bytes, "..."
// ending a cut message.
func truncateHealthMessage(m string) string {
	if len(m) <= corev1.ResourceHealthMessageMaxLength {
		return m
	}
	return m[:corev1.ResourceHealthMessageMaxLength-3] + "..."
}

func toResourceHealth(h drahealthv1.HealthStatus) corev1.ResourceHealthStatus {
	switch h {
	case drahealthv1.HealthStatus_HEALTHY:
		return corev1.ResourceHealthStatusHealthy
	case drahealthv1.HealthStatus_UNHEALTHY:
		return corev1.ResourceHealthStatusUnhealthy
	default:
		return corev1.ResourceHealthStatusUnknown
	}
}

// update is the kubelet's buildDeviceHealth and updateHealthInfo for one
// report of driver: each reported device stamped now, with its timeout
// (the driver's, else 30s; a negative one ignored); a device not reported
// and expired goes. It tells whether anything changed.
func (c *healthCache) update(driver string, stream uint64, devices []*drahealthv1.DeviceHealth) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams[driver] = stream
	now := c.now()
	cur := c.drivers[driver]
	if cur == nil {
		cur = map[string]deviceHealth{}
		c.drivers[driver] = cur
	}
	changed := false
	reported := map[string]bool{}
	ignored := 0
	for _, d := range devices {
		timeout := defaultHealthTimeout
		if s := d.GetHealthCheckTimeoutSeconds(); s > 0 {
			timeout = time.Duration(s) * time.Second
		}
		h := deviceHealth{health: toResourceHealth(d.GetHealth()), message: truncateHealthMessage(d.GetMessage()), lastUpdated: now, timeout: timeout}
		key := d.GetDevice().GetPoolName() + "/" + d.GetDevice().GetDeviceName()
		reported[key] = true
		old, ok := cur[key]
		if !ok && len(cur) >= maxDevicesPerDriver {
			ignored++
			continue
		}
		if !ok || old.health != h.health || old.message != h.message || old.timeout != h.timeout {
			changed = true
		}
		cur[key] = h
	}
	if ignored > 0 {
		c.log.Error("Health report contains more devices than the cache keeps per driver, ignoring new devices beyond the limit", "driverName", driver, "limit", maxDevicesPerDriver, "ignoredDevices", ignored)
	}
	for key, h := range cur {
		if !reported[key] && now.Sub(h.lastUpdated) > h.timeout {
			delete(cur, key)
			changed = true
		}
	}
	if changed {
		c.signal()
	}
	return changed
}

// clearDriver is the kubelet's: a driver whose stream ended says nothing
// of its devices any more (Unknown) — unless another stream of it
// (a registration that replaced the one of this stream) reported since.
func (c *healthCache) clearDriver(driver string, stream uint64) {
	c.mu.Lock()
	_, ok := c.drivers[driver]
	if s, seen := c.streams[driver]; seen && s != stream {
		ok = false
	} else {
		delete(c.drivers, driver)
		delete(c.streams, driver)
	}
	c.mu.Unlock()
	if ok {
		c.signal()
	}
}

// snapshot is the record to publish: every device's health as the
// kubelet's getHealthInfo says it now (Unknown, with no message, once its
// report is older than its timeout), and when the next report expires.
func (c *healthCache) snapshot() (*schemas.DRAHealth, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	out := &schemas.DRAHealth{Devices: []schemas.DRADeviceHealth{}}
	var next time.Time
	for driver, devs := range c.drivers {
		for key, h := range devs {
			pool, device := splitKey(key)
			d := schemas.DRADeviceHealth{Driver: driver, Pool: pool, Device: device, Health: string(h.health), Message: h.message,
				LastUpdated: h.lastUpdated.UTC(), Timeout: h.timeout}
			if end := h.lastUpdated.Add(h.timeout); now.After(end) {
				d.Health, d.Message = string(corev1.ResourceHealthStatusUnknown), ""
			} else if next.IsZero() || end.Before(next) {
				next = end
			}
			out.Devices = append(out.Devices, d)
		}
	}
	sort.Slice(out.Devices, func(i, j int) bool {
		a, b := out.Devices[i], out.Devices[j]
		if a.Driver != b.Driver {
			return a.Driver < b.Driver
		}
		if a.Pool != b.Pool {
			return a.Pool < b.Pool
		}
		return a.Device < b.Device
	})
	return out, next
}

// splitKey splits "pool/device" at its last slash (a pool name may hold
// slashes, a device name may not).
func splitKey(key string) (string, string) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// watchHealth follows a driver's NodeWatchResources stream until ctx
// ends (the driver deregistered or registered anew): the kubelet's
// health goroutine in DRAPluginManager.add, trying again every 5s, and
// stopping for good when the driver answers Unimplemented.
func (c *healthCache) watchHealth(ctx context.Context, driver string, conn *grpc.ClientConn, service string) {
	log := c.log.With("pluginName", driver)
	for {
		stream, err := watchResources(ctx, conn, service)
		if err == nil {
			log.Info("Successfully started WatchResources health stream")
			c.mu.Lock()
			c.lastID++
			id := c.lastID
			c.mu.Unlock()
			err = c.handleStream(stream, driver, id)
			log.Info("WatchResources health stream has ended", "err", err)
		} else {
			log.Debug("Failed to establish WatchResources stream, will retry", "err", err)
		}
		if status.Code(err) == codes.Unimplemented {
			log.Info("Driver does not support WatchResources health stream, stopping")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(healthRetryPeriod):
		}
	}
}

// handleStream is the kubelet's HandleWatchResourcesStream: each report
// into the cache; the driver's devices cleared when the stream ends.
func (c *healthCache) handleStream(stream drahealthv1.DRAResourceHealth_NodeWatchResourcesClient, driver string, id uint64) error {
	defer c.clearDriver(driver, id)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		c.update(driver, id, resp.GetDevices())
	}
}

// runHealth publishes the health record (key drahealth) when the cache
// changes and when a report expires, until ctx ends.
func (d *Daemon) runHealth(ctx context.Context) {
	var last []byte
	for {
		rec, next := d.dra.health.snapshot()
		b, err := json.Marshal(rec)
		if err == nil && !bytes.Equal(b, last) {
			if _, _, err = d.w.Put(ctx, bus.KeyDRAHealth, rec); err == nil {
				last = b
			} else {
				d.o.Log.Warn("Cannot publish DRA device health, retrying", "err", err)
				next = time.Now().Add(retryPeriod)
			}
		}
		var timer <-chan time.Time
		if !next.IsZero() {
			timer = time.After(time.Until(next) + 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-d.dra.health.changed:
		case <-timer:
		}
	}
}
