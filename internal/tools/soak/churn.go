package soak

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// churner drives the soak's objects through the API: it keeps the node at
// its pod limit and, whenever the node is full, takes pods away (a
// Deployment scaled down or rolled, a running bare pod deleted), and fills
// every free place with new work (a Job, bare pods, a Deployment scaled
// up). Finished Job pods go with their Job (TTL 0), finished bare pods are
// deleted by the churner. Random, from a seed: a run can be repeated.
type churner struct {
	kube   kubernetes.Interface
	pods   *podTracker
	target int
	rng    *rand.Rand
	// disruptEvery spaces the take-aways; the fills follow free places.
	disruptEvery time.Duration
	replicas     map[string]int
	rolled       map[string]time.Time
	lastDisrupt  time.Time
	configRev    int
	lastConfig   time.Time
	seq          int
	deleting     map[types.UID]bool
	actions      map[string]int
	errorf       func(format string, args ...any)
}

func newChurner(kube kubernetes.Interface, pods *podTracker, target int, seed uint64, errorf func(string, ...any)) *churner {
	return &churner{kube: kube, pods: pods, target: target, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		disruptEvery: 2 * time.Second, replicas: map[string]int{}, rolled: map[string]time.Time{},
		deleting: map[types.UID]bool{}, actions: map[string]int{}, errorf: errorf}
}

// setUp creates the namespace's configMap and secret and the Deployments
// at their starting shares, which fill the node to target.
func (c *churner) setUp(ctx context.Context) error {
	if _, err := c.kube.CoreV1().ConfigMaps(Namespace).Create(ctx, configMap(0), metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.kube.CoreV1().Secrets(Namespace).Create(ctx, secret(), metav1.CreateOptions{}); err != nil {
		return err
	}
	c.lastConfig = time.Now()
	left := c.target
	for i, k := range deploymentKinds {
		n := int(math.Round(k.share * float64(c.target)))
		if i == 0 {
			// The first takes what rounding leaves, so the sum is target.
			n = c.target
			for _, o := range deploymentKinds[1:] {
				n -= int(math.Round(o.share * float64(c.target)))
			}
		}
		n = min(max(n, 0), left)
		left -= n
		c.replicas[k.name] = n
		if _, err := c.kube.AppsV1().Deployments(Namespace).Create(ctx, deployment(k, n), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// step is one turn: housekeeping, then a fill when there is room or a
// take-away when the node is full and the last one is long enough ago.
func (c *churner) step(ctx context.Context) {
	c.sweepBare(ctx)
	if time.Since(c.lastConfig) > time.Minute {
		// configMap volumes follow their object: every pod's copy is
		// rewritten.
		c.configRev++
		if _, err := c.kube.CoreV1().ConfigMaps(Namespace).Update(ctx, configMap(c.configRev), metav1.UpdateOptions{}); err != nil {
			c.errorf("update configMap: %v", err)
		}
		c.lastConfig = time.Now()
		c.actions["configmap-update"]++
	}
	free := c.target - c.pods.counts().Live
	switch {
	case free > 0:
		c.fill(ctx, free)
	case time.Since(c.lastDisrupt) >= c.disruptEvery:
		c.disrupt(ctx)
		c.lastDisrupt = time.Now()
	}
}

func (c *churner) fill(ctx context.Context, free int) {
	switch r := c.rng.Float64(); {
	case r < 0.35 && free >= 2:
		p := min(free, 1+c.rng.IntN(4))
		c.seq++
		j := job(fmt.Sprintf("job-%d", c.seq), p*(1+c.rng.IntN(3)), p, 2+c.rng.IntN(6), c.rng.IntN(4) == 0)
		if _, err := c.kube.BatchV1().Jobs(Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			c.errorf("create job: %v", err)
			return
		}
		c.actions["job"]++
	case r < 0.7:
		for range min(free, 1+c.rng.IntN(3)) {
			c.seq++
			seconds := 0 // until deleted
			if c.rng.IntN(3) > 0 {
				seconds = 3 + c.rng.IntN(10)
			}
			if _, err := c.kube.CoreV1().Pods(Namespace).Create(ctx, barePod(fmt.Sprintf("bare-%d", c.seq), seconds), metav1.CreateOptions{}); err != nil {
				c.errorf("create pod: %v", err)
				return
			}
			c.actions["bare-pod"]++
		}
	default:
		k := deploymentKinds[c.rng.IntN(len(deploymentKinds))]
		n := min(c.replicas[k.name]+min(free, 1+c.rng.IntN(5)), c.bound(k.max))
		if n > c.replicas[k.name] {
			c.scale(ctx, k.name, n, "scale-up")
		}
	}
}

func (c *churner) disrupt(ctx context.Context) {
	switch r := c.rng.Float64(); {
	case r < 0.4:
		k := deploymentKinds[c.rng.IntN(len(deploymentKinds))]
		n := max(c.replicas[k.name]-(1+c.rng.IntN(max(1, c.target/20))), c.bound(k.min))
		if n < c.replicas[k.name] {
			c.scale(ctx, k.name, n, "scale-down")
		}
	case r < 0.6:
		k := deploymentKinds[c.rng.IntN(len(deploymentKinds))]
		if time.Since(c.rolled[k.name]) < time.Minute {
			return
		}
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"%d"}}}}}`, revAnnotation, time.Now().UnixNano())
		if _, err := c.kube.AppsV1().Deployments(Namespace).Patch(ctx, k.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			c.errorf("roll %s: %v", k.name, err)
			return
		}
		c.rolled[k.name] = time.Now()
		c.actions["rollout"]++
	default:
		// A running bare pod deleted while it runs.
		for _, p := range c.pods.list("bare") {
			if p.Spec.RestartPolicy == corev1.RestartPolicyAlways && p.DeletionTimestamp == nil && !c.deleting[p.UID] {
				c.deletePod(ctx, p, "delete-running-pod")
				return
			}
		}
	}
}

// bound is a share of the node as a number of replicas (at least 1).
func (c *churner) bound(share float64) int {
	return max(1, int(math.Round(share*float64(c.target))))
}

func (c *churner) scale(ctx context.Context, name string, n int, action string) {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	if _, err := c.kube.AppsV1().Deployments(Namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.errorf("scale %s to %d: %v", name, n, err)
		return
	}
	c.replicas[name] = n
	c.actions[action]++
}

// sweepBare deletes the bare pods that finished.
func (c *churner) sweepBare(ctx context.Context) {
	for _, p := range c.pods.list("bare") {
		if finished(p) && !c.deleting[p.UID] {
			c.deletePod(ctx, p, "delete-finished-pod")
		}
	}
	if len(c.deleting) > 10*c.target {
		c.deleting = map[types.UID]bool{} // long gone
	}
}

func (c *churner) deletePod(ctx context.Context, p *corev1.Pod, action string) {
	err := c.kube.CoreV1().Pods(Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		c.errorf("delete pod %s: %v", p.Name, err)
		return
	}
	c.deleting[p.UID] = true
	c.actions[action]++
}

// drain deletes every object of the soak that makes pods, as a user
// taking the workload off would: the Deployments and Jobs (their pods go
// through the garbage collector) and the bare pods.
func (c *churner) drain(ctx context.Context) error {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	if err := c.kube.AppsV1().Deployments(Namespace).DeleteCollection(ctx, opts, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := c.kube.BatchV1().Jobs(Namespace).DeleteCollection(ctx, opts, metav1.ListOptions{}); err != nil {
		return err
	}
	return c.kube.CoreV1().Pods(Namespace).DeleteCollection(ctx, opts, metav1.ListOptions{LabelSelector: kindLabel + "=bare"})
}
