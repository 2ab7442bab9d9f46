package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// TestWatchExpired (issue 37, faults around the control plane): the node's
// pod watch expires mid-churn — kube-apiserver answers 410 Gone ("too old
// resource version") when nodelet-sources watches again from where it was
// — and the node relists: the pods created and deleted while it could not
// see them are run and stopped, no pod is lost or run twice, no container
// restarts, statuses and events reach the API.
//
// What provokes it, as in production: a watch that ends cleanly (there a
// server-side timeout; here kube-apiserver restarting) is started again
// by client-go's reflector from the last resourceVersion it saw, and etcd
// has compacted past it meanwhile; kube-apiserver serves pod watches from
// etcd (--watch-cache=false: with its watch cache the window is larger
// than a test can outrun). nodelet-sources is stopped (SIGSTOP) across the
// restart, pods change and etcd is compacted, and it is let go: it reads
// its watch's end, watches again from the old resourceVersion, gets the
// 410 (the test checks that kube-apiserver answers exactly that to a
// watch from there, and finds both requests in its audit log) and
// relists. A connection broken instead (ss -K) does not provoke it:
// client-go then starts over with a streaming list (sendInitialEvents),
// never a watch from the old revision.
func TestWatchExpired(t *testing.T) {
	// An audit log of the node's pod lists and watches shows the relist.
	dir := t.TempDir()
	auditLog, policy := filepath.Join(dir, "audit.log"), filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	apiserverFlags := []string{"--watch-cache=false", "--audit-log-path=" + auditLog, "--audit-policy-file=" + policy}
	if err := cp.RestartAPIServer(apiserverFlags...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.RestartAPIServer(); err != nil {
			t.Errorf("kube-apiserver back with its watch cache: %v", err)
		}
	})
	n := e2e.NewNode(t, e2e.NodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	t.Cleanup(func() {
		_ = pods.DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	})
	tryCreate := func(name string) error {
		p := e2e.APIPod(nodeName, ns, name, "")
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
		_, err := pods.Create(ctx, p, metav1.CreateOptions{})
		return err
	}
	create := func(name string) {
		t.Helper()
		if err := tryCreate(name); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) error {
		return pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](2)})
	}
	steady := []string{"steady-0", "steady-1", "steady-2", "gone-while-stopped"}
	for _, name := range steady {
		create(name)
	}
	ids := map[string]string{}
	eventually.True(t, 90*time.Second, "every pod Running in the API", func() bool {
		for _, name := range steady {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			ids[name] = p.Status.ContainerStatuses[0].ContainerID
		}
		return true
	})

	// Churn: a pod created every 700 ms, each deleted two later.
	churn := &churner{create: tryCreate, del: del}
	churnCtx, stopChurn := context.WithCancel(ctx)
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); churn.run(churnCtx) }()
	defer func() { stopChurn(); <-churnDone }()
	eventually.True(t, 30*time.Second, "churn under way", func() bool { return churn.created() >= 3 })

	sources := n.WaitReady()[bus.Sources].PID
	if err := syscall.Kill(sources, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(sources, syscall.SIGCONT)
		}
	}()
	// kube-apiserver restarting ends every watch; nodelet-sources' ends
	// in its socket's buffer, to be read when it runs again.
	if err := cp.RestartAPIServer(apiserverFlags...); err != nil {
		t.Fatal(err)
	}
	// Every revision the stopped nodelet-sources may have seen is at or
	// below this one.
	l, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := l.ResourceVersion
	// What it cannot see: one pod made, one deleted, the churn going on.
	create("made-while-stopped")
	if err := del("gone-while-stopped"); err != nil {
		t.Fatal(err)
	}
	k := churn.created()
	eventually.True(t, 30*time.Second, "churn during the stop", func() bool { return churn.created() >= k+3 })
	rev, err := cp.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("nodelet-sources stopped at resourceVersion %s or earlier; etcd compacted to %d", seen, rev)
	expectExpired(t, ctx, admin, ns, seen)
	released := time.Now()
	if err := syscall.Kill(sources, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	k = churn.created()
	eventually.True(t, 30*time.Second, "churn after the expiry", func() bool { return churn.created() >= k+3 })
	stopChurn()
	<-churnDone

	// Converged: every pod the API has is Running there with one sandbox
	// and one running container in CRI; every pod deleted is gone from the
	// API (the node confirmed its end) and from CRI.
	var why string
	converged := func() bool {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			why = err.Error()
			return false
		}
		view := e2e.CRIView(t, ctrd)
		want := map[string]bool{}
		for _, p := range l.Items {
			if p.DeletionTimestamp != nil {
				why = p.Name + " still terminating"
				return false
			}
			want[string(p.UID)] = true
			c := view[string(p.UID)]
			if p.Status.Phase != corev1.PodRunning || c == nil || c.Sandboxes != 1 || c.ReadySandboxes != 1 || c.Running != 1 {
				why = fmt.Sprintf("%s: phase %s, CRI %+v", p.Name, p.Status.Phase, c)
				return false
			}
		}
		for _, name := range append(churn.deletedNames(), "gone-while-stopped") {
			if _, err := pods.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				why = name + " not gone from the API"
				return false
			}
		}
		// A pod of this namespace running in CRI that the API no longer
		// has is one the node lost track of.
		np, err := n.Pods()
		if err != nil {
			why = err.Error()
			return false
		}
		names := map[string]int{}
		for _, p := range np.Items {
			if p.Namespace != ns {
				continue
			}
			names[p.Name]++
			if names[p.Name] > 1 {
				t.Fatalf("%s twice in the node's pods", p.Name)
			}
			if c := view[string(p.UID)]; !want[string(p.UID)] && c != nil && c.Running > 0 {
				why = p.Name + " deleted from the API but running on the node"
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !converged() {
		if time.Now().After(deadline) {
			n.ExplainStuck(why)
			t.Fatalf("not converged after the watch expired: %s", why)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("watch expired: converged %s after nodelet-sources was let go (%d pods created, %d deleted meanwhile)",
		time.Since(released).Round(10*time.Millisecond), churn.created()+1, len(churn.deletedNames())+1)
	eventually.State(t, 10*time.Second, "nodelet-sources' watch from before the compaction, then a relist (audit log)", func() (bool, string) {
		ok, requests := sourcesExpiredAndRelisted(t, auditLog, released, rev)
		return ok, "released at " + released.Format(time.RFC3339Nano) + "; nodelet-sources' requests:\n" + requests
	})
	for _, name := range steady[:3] {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].ContainerID != ids[name] {
			t.Fatalf("%s after the expiry: %v %+v", name, err, p.Status)
		}
	}
	// The node's events for the pod it learned of by relisting reach the API.
	eventually.True(t, 60*time.Second, "made-while-stopped's Started event in the API", func() bool {
		evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=made-while-stopped"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "Started" && e.Source.Host == nodeName {
				return true
			}
		}
		return false
	})
}

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:node:` + nodeName + `"]
  verbs: [list, watch]
  resources: [{group: "", resources: [pods]}]
- level: None
`

// sourcesExpiredAndRelisted reads kube-apiserver's audit log for what
// nodelet-sources asked after since: a watch from a resourceVersion at or
// below compacted (the one answered 410), and after it a relist (a LIST,
// or a watch with sendInitialEvents, client-go's streaming list). It
// returns whether both happened, and the requests it read.
func sourcesExpiredAndRelisted(t *testing.T, path string, since time.Time, compacted int64) (bool, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var expired, relisted bool
	var requests strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Verb, Stage, UserAgent, RequestURI string
			StageTimestamp                     time.Time
		}
		if json.Unmarshal([]byte(line), &e) != nil || !strings.HasPrefix(e.UserAgent, "nodelet-sources") {
			continue
		}
		fmt.Fprintf(&requests, "%s %s %s %s\n", e.StageTimestamp.Format(time.RFC3339Nano), e.Stage, e.Verb, e.RequestURI)
		if e.Stage != "ResponseStarted" && e.Stage != "ResponseComplete" || !e.StageTimestamp.After(since) {
			continue
		}
		u, err := url.Parse(e.RequestURI)
		if err != nil {
			continue
		}
		q := u.Query()
		rv, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
		switch {
		case e.Verb == "list" || q.Get("sendInitialEvents") == "true":
			relisted = relisted || expired
		case e.Verb == "watch" && rv > 0 && rv < compacted:
			expired = true
		}
	}
	return expired && relisted, requests.String()
}

// expectExpired checks that kube-apiserver answers a pod watch from
// resourceVersion rv with 410 Gone: what nodelet-sources' watch gets.
func expectExpired(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, rv string) {
	t.Helper()
	w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		t.Fatalf("watch from %s: %v", rv, err)
	}
	defer w.Stop()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch from %s closed without an error", rv)
			}
			if ev.Type != watch.Error {
				t.Fatalf("watch from %s delivered %s: etcd not compacted past it, or served from a cache", rv, ev.Type)
			}
			err := apierrors.FromObject(ev.Object)
			if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				t.Fatalf("watch from %s: %v, want 410 Gone", rv, err)
			}
			t.Logf("kube-apiserver to a watch from %s: %v", rv, err)
			return
		case <-timeout:
			t.Fatalf("watch from %s: no 410 within 20 s", rv)
		}
	}
}

// churner creates a pod every 700 ms and deletes each two creations
// later, remembering what it deleted.
type churner struct {
	create  func(string) error
	del     func(string) error
	mu      sync.Mutex
	n       int
	deleted []string
}

func (c *churner) run(ctx context.Context) {
	var live []string
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("churn-%d", i)
		if err := c.create(name); err != nil {
			// kube-apiserver restarting: try the next one.
			c.pause(ctx)
			continue
		}
		live = append(live, name)
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
		if len(live) > 2 {
			if err := c.del(live[0]); err != nil {
				c.pause(ctx)
				continue
			}
			c.mu.Lock()
			c.deleted = append(c.deleted, live[0])
			c.mu.Unlock()
			live = live[1:]
		}
		c.pause(ctx)
	}
}

func (c *churner) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(700 * time.Millisecond):
	}
}

func (c *churner) created() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
func (c *churner) deletedNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.deleted...)
}
