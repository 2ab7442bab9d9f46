package bus_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// TestConfigCountsTheStreams: config checks bus.maxStore against the
// number of streams; it must be the bus's.
func TestConfigCountsTheStreams(t *testing.T) {
	if len(bus.Buckets) != config.BusBuckets {
		t.Fatalf("config.BusBuckets = %d, bus has %d buckets", config.BusBuckets, len(bus.Buckets))
	}
}

// TestTinyStoreFullThenUnhealthyThenRestarted: with a tiny store a bucket
// fills and its owner's writes fail with a clear error instead of growing
// the store without bound; when JetStream goes off (as nats-server does
// when its store fails) the bus reports itself unhealthy, which makes
// nodelet-bus exit to be restarted; after the restart it is healthy and
// everything stored before is still there.
func TestTinyStoreFullThenUnhealthyThenRestarted(t *testing.T) {
	const each = 64 << 10
	l := bus.Limits{BucketMaxBytes: each, EventsMaxBytes: each, MaxValueSize: 16 << 10,
		MaxStore: int64(len(bus.Buckets)+3) * each}
	b := bustest.StartWithLimits(t, t.TempDir(), l)
	ctx := ctxT(t)
	src := b.Connect(bus.Sources)
	var stored []string
	big := strings.Repeat("x", 8<<10)
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		key := "k" + string(rune('a'+i%26)) + strings.Repeat("z", i/26)
		if _, err := src.Put(ctx, bus.BucketDesired, key, &schemas.Heartbeat{Component: big}); err != nil {
			full = err
			break
		}
		stored = append(stored, key)
	}
	if full == nil || !strings.Contains(full.Error(), "maximum bytes") {
		t.Fatalf("a full bucket took more writes or failed unclearly: %v", full)
	}
	// A value over MaxValueSize is refused outright.
	if _, err := src.Put(ctx, bus.BucketSources, "huge", &schemas.Heartbeat{Component: strings.Repeat("y", 32<<10)}); err == nil {
		t.Fatal("a value larger than MaxValueSize was stored")
	}
	if err := b.Server.Healthy(); err != nil {
		t.Fatalf("a full bucket is not a sick bus: %v", err)
	}
	if err := bus.DisableJetStream(b.Server); err != nil {
		t.Fatal(err)
	}
	if err := b.Server.Healthy(); err == nil {
		t.Fatal("bus healthy with JetStream off")
	}
	b.Restart(false)
	if err := b.Server.Healthy(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	for _, k := range stored {
		v, _, err := bus.Get[schemas.Heartbeat](ctx, src, bus.BucketDesired, k)
		if err != nil || v == nil || v.Component != big {
			t.Fatalf("%s lost across the restart: %v %v", k, v, err)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"0b9c6e1e-1a2b-4c3d-8e9f-0a1b2c3d4e5f", true}, {"uid.app.liveness", true}, {"a_b=c/d", true},
		{"", false}, {"0.", false}, {"x.", false}, {".x", false}, {"..", false}, {"a..b", false},
		{"a b", false}, {"a*", false}, {"a>", false}, {"ü", false},
	} {
		if err := bus.ValidKey(tc.key); (err == nil) != tc.ok {
			t.Errorf("ValidKey(%q) = %v", tc.key, err)
		}
	}
	if s := bus.EventSubject(bus.Sources, "0."); s != "nodelet.v1.events.sources.invalid" {
		t.Errorf("event subject for a bad UID: %s", s)
	}
	if s := bus.EventSubject(bus.Runtime, "*"); s != "nodelet.v1.events.runtime.*" {
		t.Errorf("event filter: %s", s)
	}
}

// TestSeedFromSystemd: under the generated units a daemon reads the seed
// systemd handed in, not the bus's directory (which it cannot see).
func TestSeedFromSystemd(t *testing.T) {
	state := t.TempDir()
	if got := bus.SeedPath(state, bus.Prober); got != bus.CredentialPath(state, bus.Prober) {
		t.Fatalf("without systemd: %s", got)
	}
	creds := t.TempDir()
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	if got := bus.SeedPath(state, bus.Prober); got != bus.CredentialPath(state, bus.Prober) {
		t.Fatalf("nothing handed in: %s", got)
	}
	if err := os.WriteFile(filepath.Join(creds, bus.SystemdCredential), []byte("SU..."), 0o400); err != nil {
		t.Fatal(err)
	}
	if got := bus.SeedPath(state, bus.Prober); got != filepath.Join(creds, bus.SystemdCredential) {
		t.Fatalf("handed in: %s", got)
	}
}

// TestOldLayoutDropped: the streams a bus before accounts kept in the
// global account are removed at start; nothing reads them any more.
func TestOldLayoutDropped(t *testing.T) {
	state := t.TempDir()
	old := filepath.Join(state, "bus", "jetstream", "$G", "streams", "KV_nodelet_v1_pods_desired")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	bustest.StartIn(t, state)
	if _, err := os.Stat(filepath.Join(state, "bus", "jetstream", "$G")); err == nil {
		t.Fatal("the old layout's store is still there")
	}
}
