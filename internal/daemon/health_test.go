package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// A bus mirror whose watch is lost makes the daemon's heartbeat unready,
// naming the bucket next to what SetHealth said; the heartbeat is ready
// again once the mirror has no outage.
func TestHeartbeatReportsAMirrorOutage(t *testing.T) {
	b := bustest.Start(t)
	conn := b.Connect(bus.Admission)
	beats := make(chan schemas.Heartbeat, 100)
	sup := b.Connect(bus.Supervisor)
	sub, err := sup.NC.Subscribe(bus.HealthSubject(bus.Admission), func(msg *nats.Msg) {
		_, hb, err := schemas.Decode[schemas.Heartbeat](msg.Data)
		if err != nil {
			t.Error(err)
			return
		}
		beats <- *hb
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sup.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.Bus.HeartbeatInterval = time.Hour // only changes send a heartbeat
	env := &Env{Config: cfg, Log: bustest.Logger(), Bus: conn, Component: bus.Admission, Started: time.Now(),
		beat: make(chan struct{}, 1)}
	env.SetHealth(true, "Loading verdicts")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go heartbeats(ctx, env)

	next := func(what string, ok func(schemas.Heartbeat) bool) schemas.Heartbeat {
		t.Helper()
		for {
			select {
			case hb := <-beats:
				if ok(hb) {
					return hb
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no heartbeat %s", what)
			}
		}
	}
	next("at start", func(hb schemas.Heartbeat) bool { return hb.Ready && hb.Message == "Loading verdicts" })

	// admission may not read the images bucket: the watch cannot be
	// established, ever.
	m := bus.NewMirror(conn, bus.BucketImages, ">", func(bus.Update[schemas.ImageRecord]) {})
	m.Grace = time.Millisecond
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(mctx) }()
	hb := next("naming the outage", func(hb schemas.Heartbeat) bool { return !hb.Ready })
	if !strings.HasPrefix(hb.Message, "Loading verdicts; bus watch of "+bus.BucketImages+" lost since ") {
		t.Fatalf("unready heartbeat says %q", hb.Message)
	}
	if ready, msg := env.Health(); ready || msg != hb.Message {
		t.Fatalf("Health() = %v %q, the heartbeat said %q", ready, msg, hb.Message)
	}
	stop()
	<-done
	next("ready after the mirror stopped", func(hb schemas.Heartbeat) bool { return hb.Ready && hb.Message == "Loading verdicts" })
}
