package bus_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func desired(name, uid string) *schemas.PodDesired {
	return &schemas.PodDesired{Source: schemas.SourceFile, Pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: ktypes.UID("u-" + uid)}}}
}

func TestAnonymousAndWrongCredentialsRefused(t *testing.T) {
	b := bustest.Start(t)
	if nc, err := nats.Connect(b.URL, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous: unexpected error %v", err)
	}
	// A fresh key the bus never issued.
	other := t.TempDir()
	if _, err := bus.EnsureCredentials(other); err != nil {
		t.Fatal(err)
	}
	_, err := bus.Connect(bus.ConnectOptions{URL: b.URL, Component: bus.Sources, StateDir: other, NoRetry: true, Log: bustest.Logger()})
	if err == nil {
		t.Fatal("unknown credential accepted")
	}
}

func TestCredentialFilesArePrivateAndReused(t *testing.T) {
	dir := t.TempDir()
	first, err := bus.EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(bus.CredentialsDir(dir))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("credentials dir mode = %v, %v", st.Mode().Perm(), err)
	}
	for _, c := range bus.Components {
		st, err := os.Stat(bus.CredentialPath(dir, c))
		if c == bus.BusAdmin {
			// The bus's own keys live in its memory only.
			if err == nil {
				t.Fatal("the bus's key is on disk")
			}
			continue
		}
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s credential: %v", c, err)
		}
	}
	again, err := bus.EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	for c, pub := range first {
		if again[c] != pub {
			t.Errorf("%s credential changed on second start", c)
		}
	}
}

// TestRootBusTakesBackItsUsersCredentials: a bus run as root on a state
// dir the bus's own user made (the systemd units run it as nodelet-bus)
// takes the seeds back and keeps them.
func TestRootBusTakesBackItsUsersCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it chowns files to another user)")
	}
	dir := t.TempDir()
	first, err := bus.EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	const other = 65534
	err = filepath.WalkDir(bus.CredentialsDir(dir), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, other, other)
	})
	if err != nil {
		t.Fatal(err)
	}
	again, err := bus.EnsureCredentials(dir)
	if err != nil {
		t.Fatalf("root bus on nodelet-bus's credentials: %v", err)
	}
	for c, pub := range first {
		if again[c] != pub {
			t.Errorf("%s credential changed", c)
		}
		st, err := os.Stat(bus.CredentialPath(dir, c))
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s credential not root's again: %v", c, err)
		}
	}
}

// TestAccessMatrix checks each component's writes against a running bus.
func TestAccessMatrix(t *testing.T) {
	b := bustest.Start(t)
	for _, tc := range []struct {
		component, bucket string
		allowed           bool
	}{
		{bus.Sources, bus.BucketDesired, true},
		{bus.Prober, bus.BucketDesired, false},
		{bus.Prober, bus.BucketProbes, true},
		{bus.Admission, bus.BucketAdmission, true},
		{bus.Admission, bus.BucketObserved, false},
		{bus.Runtime, bus.BucketObserved, true},
		{bus.Runtime, bus.BucketStatus, false}, // reads it (start times), never writes it
		{bus.Status, bus.BucketStatus, true},
		{bus.Status, bus.BucketDesired, false},
		{bus.GC, bus.BucketPressure, true},
		{bus.KubeletServer, bus.BucketDesired, false},
		{bus.KubeletServer, bus.BucketStatus, false},
		{bus.Tap, bus.BucketDesired, false},
		{bus.Tap, bus.BucketStatus, false},
		{bus.Supervisor, bus.BucketDesired, false},
	} {
		t.Run(tc.component+"→"+tc.bucket, func(t *testing.T) {
			c := b.Connect(tc.component)
			err := newRefusals(c).call(time.Second, func(pctx context.Context) error {
				_, err := c.Put(pctx, tc.bucket, "k-"+tc.component, &schemas.Heartbeat{Component: tc.component})
				return err
			})
			if tc.allowed && err != nil {
				t.Fatalf("%s could not write %s: %v", tc.component, tc.bucket, err)
			}
			if !tc.allowed && err == nil {
				t.Fatalf("%s wrote %s", tc.component, tc.bucket)
			}
		})
	}
}

func TestTapCannotPublish(t *testing.T) {
	b := bustest.Start(t)
	tap := b.Connect(bus.Tap)
	errs := make(chan error, 10)
	tap.NC.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	for _, subj := range []string{bus.HealthSubject(bus.Tap), bus.EventSubject(bus.Tap, "x"), bus.KVSubject(bus.BucketDesired, "x"), "nodelet.v1.anything"} {
		if err := tap.NC.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("publish %s: unexpected error %v", subj, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("tap published to %s without a permission violation", subj)
		}
	}
	// But tap sees what others publish.
	got := make(chan *nats.Msg, 1)
	if _, err := tap.NC.Subscribe("nodelet.v1.health.>", func(m *nats.Msg) { got <- m }); err != nil {
		t.Fatal(err)
	}
	_ = tap.NC.Flush()
	src := b.Connect(bus.Sources)
	if err := src.PublishHeartbeat(schemas.Heartbeat{Component: bus.Sources}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Subject != bus.HealthSubject(bus.Sources) {
			t.Fatalf("tap got %s", m.Subject)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tap did not see the heartbeat")
	}
}

func TestSubscribeOutsideOwnInboxRefused(t *testing.T) {
	b := bustest.Start(t)
	prober := b.Connect(bus.Prober)
	errs := make(chan error, 1)
	prober.NC.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	if _, err := prober.NC.SubscribeSync("_INBOX_status.>"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("unexpected error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("prober subscribed to status's inbox")
	}
}

// collector gathers watch updates for assertions.
type collector[T any] struct {
	mu sync.Mutex
	u  []bus.Update[T]
}

func (c *collector[T]) add(u bus.Update[T]) { c.mu.Lock(); c.u = append(c.u, u); c.mu.Unlock() }
func (c *collector[T]) wait(t *testing.T, what string, ok func([]bus.Update[T]) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		done := ok(c.u)
		c.mu.Unlock()
		if done {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Fatalf("timed out waiting for %s; updates: %v", what, kinds(c.u))
}

func kinds[T any](u []bus.Update[T]) []string {
	var s []string
	for _, x := range u {
		s = append(s, x.Kind.String()+":"+x.Key)
	}
	return s
}

func count[T any](u []bus.Update[T], k bus.UpdateKind, key string) int {
	n := 0
	for _, x := range u {
		if x.Kind == k && (key == "" || x.Key == key) {
			n++
		}
	}
	return n
}

func TestWatchLoadsThenFollowsAndSurvivesRestartAndWipe(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	src := b.Connect(bus.Sources)
	if _, err := src.Put(ctx, bus.BucketDesired, "a", desired("a", "a")); err != nil {
		t.Fatal(err)
	}
	// A value that does not decode must be skipped, not break the watch.
	if _, err := src.PutRaw(ctx, bus.BucketDesired, "junk", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	adm := b.Connect(bus.Admission)
	var col collector[schemas.PodDesired]
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bus.Watch(wctx, adm, bus.BucketDesired, ">", col.add) }()
	col.wait(t, "initial load", func(u []bus.Update[schemas.PodDesired]) bool {
		return count(u, bus.Put, "a") == 1 && count(u, bus.Synced, "") == 1
	})
	if n := count(col.u, bus.Put, "junk"); n != 0 {
		t.Fatal("undecodable value delivered")
	}
	if _, err := src.Put(ctx, bus.BucketDesired, "b", desired("b", "b")); err != nil {
		t.Fatal(err)
	}
	if err := src.Delete(ctx, bus.BucketDesired, "a"); err != nil {
		t.Fatal(err)
	}
	col.wait(t, "put b, delete a", func(u []bus.Update[schemas.PodDesired]) bool {
		return count(u, bus.Put, "b") == 1 && count(u, bus.Deleted, "a") == 1
	})

	b.Restart(false)
	if _, err := src.Put(ctx, bus.BucketDesired, "c", desired("c", "c")); err != nil {
		t.Fatal(err)
	}
	col.wait(t, "put c after bus restart", func(u []bus.Update[schemas.PodDesired]) bool {
		return count(u, bus.Put, "c") == 1
	})
	if n := count(col.u, bus.Put, "b"); n != 1 {
		t.Fatalf("b delivered %d times after a plain restart", n)
	}

	b.Restart(true)
	if _, err := src.Put(ctx, bus.BucketDesired, "d", desired("d", "d")); err != nil {
		t.Fatal(err)
	}
	col.wait(t, "reset then d after wipe", func(u []bus.Update[schemas.PodDesired]) bool {
		return count(u, bus.Reset, "") == 1 && count(u, bus.Put, "d") == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v", err)
	}
}

func TestWriterWritesOnlyOnChange(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	src := b.Connect(bus.Sources)
	w := bus.NewWriter(src, bus.BucketDesired, nil)
	d := desired("a", "a")
	wrote, rev1, err := w.Put(ctx, "a", d)
	if err != nil || !wrote {
		t.Fatalf("first put: wrote=%v err=%v", wrote, err)
	}
	wrote, rev2, err := w.Put(ctx, "a", d)
	if err != nil || wrote || rev2 != rev1 {
		t.Fatalf("same put: wrote=%v rev %d→%d err=%v", wrote, rev1, rev2, err)
	}
	// A new writer (a restarted daemon) sees the stored value and skips too.
	w2 := bus.NewWriter(b.Connect(bus.Sources), bus.BucketDesired, nil)
	if wrote, _, err := w2.Put(ctx, "a", d); err != nil || wrote {
		t.Fatalf("restarted writer rewrote an unchanged value: %v %v", wrote, err)
	}
	d.Source = schemas.SourceHTTP
	if wrote, _, err := w2.Put(ctx, "a", d); err != nil || !wrote {
		t.Fatalf("changed value not written: %v %v", wrote, err)
	}
	if deleted, err := w2.Delete(ctx, "a"); err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	if deleted, err := w2.Delete(ctx, "a"); err != nil || deleted {
		t.Fatalf("second delete: %v %v", deleted, err)
	}
}

// PutMany writes what changed in one go, in order, skips what the bucket
// already holds as Put does, and a bad entry fails alone.
func TestWriterPutMany(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	src := b.Connect(bus.Sources)
	w := bus.NewWriter(src, bus.BucketDesired, nil)
	_, revA, err := w.Put(ctx, "a", desired("a", "a"))
	if err != nil {
		t.Fatal(err)
	}
	res := w.PutMany(ctx, []bus.Entry{
		{Key: "a", Msg: desired("a", "a")}, // unchanged
		{Key: "b", Msg: desired("b", "b")},
		{Key: "bad key", Msg: desired("c", "c")},
		{Key: "d", Msg: desired("d", "d")},
	})
	if len(res) != 4 || res[0].Wrote || res[0].Rev != revA || res[0].Err != nil {
		t.Fatalf("unchanged entry: %+v", res[0])
	}
	if !res[1].Wrote || !res[3].Wrote || res[1].Err != nil || res[3].Err != nil || !(revA < res[1].Rev && res[1].Rev < res[3].Rev) {
		t.Fatalf("written entries (revisions in order after %d): %+v, %+v", revA, res[1], res[3])
	}
	if !bus.IsRejected(res[2].Err) || res[2].Wrote {
		t.Fatalf("bad key: %+v", res[2])
	}
	for _, k := range []string{"b", "d"} {
		v, rev, err := bus.Get[schemas.PodDesired](ctx, src, bus.BucketDesired, k)
		if err != nil || v == nil || v.Pod.Name != k {
			t.Fatalf("get %s: %v %v", k, v, err)
		}
		if want := res[map[string]int{"b": 1, "d": 3}[k]].Rev; rev != want {
			t.Fatalf("%s: revision %d, PutMany said %d", k, rev, want)
		}
	}
	// What PutMany wrote is known: putting it again writes nothing.
	if wrote, _, err := w.Put(ctx, "b", desired("b", "b")); err != nil || wrote {
		t.Fatalf("rewrote b: %v %v", wrote, err)
	}
}

func TestWriterResetsAfterWipe(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	resets := make(chan struct{}, 1)
	src := b.Connect(bus.Sources)
	w := bus.NewWriter(src, bus.BucketDesired, func() error { resets <- struct{}{}; return nil })
	if _, _, err := w.Put(ctx, "a", desired("a", "a")); err != nil {
		t.Fatal(err)
	}
	b.Restart(true)
	select {
	case <-resets:
	case <-time.After(20 * time.Second):
		t.Fatal("writer did not notice the wiped store")
	}
	if wrote, _, err := w.Put(ctx, "a", desired("a", "a")); err != nil || !wrote {
		t.Fatalf("after wipe the value must be written again: %v %v", wrote, err)
	}
	v, _, err := bus.Get[schemas.PodDesired](ctx, src, bus.BucketDesired, "a")
	if err != nil || v == nil || v.Pod.Name != "a" {
		t.Fatalf("get after wipe: %v %v", v, err)
	}
}

// A reset whose puts the just-restarted bus refuses is called again until
// it succeeds, so a wiped store always gets the owner's state back.
func TestWriterRetriesAFailedReset(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	src := b.Connect(bus.Sources)
	calls := make(chan int, 10)
	var mu sync.Mutex
	n, succeeded, afterSuccess := 0, false, 0
	var w *bus.Writer
	w = bus.NewWriter(src, bus.BucketDesired, func() error {
		mu.Lock()
		n++
		calls <- n
		if succeeded {
			afterSuccess = n
		}
		fail := n < 3
		mu.Unlock()
		if fail {
			return errors.New("jetstream not enabled")
		}
		// The put itself may be refused while the restarted bus settles
		// (a loaded machine): that failure is retried too.
		_, _, err := w.Put(context.Background(), "a", desired("a", "a"))
		mu.Lock()
		succeeded = succeeded || err == nil
		mu.Unlock()
		return err
	})
	if _, _, err := w.Put(ctx, "a", desired("a", "a")); err != nil {
		t.Fatal(err)
	}
	b.Restart(true)
	for want := 1; want <= 3; want++ {
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("reset call %d, want %d", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("reset not called a %d. time after the wiped store", want)
		}
	}
	eventually.Nil(t, 20*time.Second, "the state written again", func() error {
		v, _, err := bus.Get[schemas.PodDesired](ctx, src, bus.BucketDesired, "a")
		if err != nil || v == nil {
			return fmt.Errorf("get: %v %v", v, err)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if afterSuccess != 0 {
		t.Fatalf("reset called again (%d) after it succeeded", afterSuccess)
	}
}

func TestEventsAreStoredOnceAndSurviveBusRestart(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	rt := b.Connect(bus.Runtime)
	rt.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", UID: "u1"}, Type: "Normal", Reason: "Started", Message: "one"})
	if err := rt.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	b.Server.Shutdown()
	rt.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", UID: "u1"}, Type: "Normal", Reason: "Killing", Message: "two"})
	time.Sleep(300 * time.Millisecond)
	b.Restart(false)
	if err := rt.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	tap := b.Connect(bus.Tap)
	s, err := tap.JS.Stream(ctx, bus.EventsStream(bus.Runtime))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("events stream holds %d messages, want 2", info.State.Msgs)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"127.0.0.1:4250", true}, {"localhost:1", true}, {"[::1]:4250", true},
		{"0.0.0.0:4250", false}, {"10.0.0.1:4250", false}, {"127.0.0.1", false}, {"127.0.0.1:99999", false},
	} {
		err := bus.CheckLoopback("bus.listen", tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v", tc.in, err)
		}
		if err != nil && !strings.Contains(err.Error(), "bus.listen") {
			t.Errorf("%s: error does not name the key: %v", tc.in, err)
		}
	}
}
