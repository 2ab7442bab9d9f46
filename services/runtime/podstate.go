package runtime

import (
	"sync"
	"time"
)

// podState is what a pod's worker remembers between syncs: the waiting
// reasons of its containers (the kubelet's reason cache,
// pkg/kubelet/reason_cache.go), the pod-level reason, whether it is being
// killed, and its active deadline. Every method takes the lock itself: no
// caller touches the fields.
type podState struct {
	mu         sync.Mutex
	waiting    map[string]*waitError
	podReason  string
	podMessage string
	// terminating: being killed; terminated: every container and the
	// sandbox are stopped; finished: terminated, and the pod's volumes are
	// unmounted and its cgroup removed.
	terminating bool
	terminated  bool
	finished    bool
	// replaced counts interrupted starts replaced, by container name.
	replaced map[string]int
	// startTime is the pod's status.startTime once known (for its active
	// deadline); deadlineExceeded: the pod was killed for passing it.
	startTime        time.Time
	deadlineExceeded bool
}

func newPodState() *podState {
	return &podState{waiting: map[string]*waitError{}, replaced: map[string]int{}}
}

// podStates holds the podState of every pod a worker synced.
type podStates struct {
	mu   sync.Mutex
	pods map[string]*podState
}

func newPodStates() *podStates { return &podStates{pods: map[string]*podState{}} }

// get returns uid's state, made on first use.
func (p *podStates) get(uid string) *podState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.pods[uid]
	if s == nil {
		s = newPodState()
		p.pods[uid] = s
	}
	return s
}

// forget drops uid's state (the pod is gone).
func (p *podStates) forget(uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, uid)
}

// setWaiting records why container name waits (nil: it does not).
func (s *podState) setWaiting(name string, w *waitError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w == nil {
		delete(s.waiting, name)
		return
	}
	s.waiting[name] = w
}

func (s *podState) waitingOf(name string) *waitError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[name]
}

// setPodReason sets the pod-level reason and message and returns the ones
// they replace (so a caller emits an event or logs only on a change).
func (s *podState) setPodReason(reason, message string) (prevReason, prevMessage string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prevReason, prevMessage = s.podReason, s.podMessage
	s.podReason, s.podMessage = reason, message
	return prevReason, prevMessage
}

// finish marks a killed pod as finished: its volumes are unmounted and
// its cgroup removed.
func (s *podState) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = s.terminated
}

// podPhase is the pod-level part of its observed state.
type podPhase struct {
	Reason, Message                   string
	Terminating, Terminated, Finished bool
}

func (s *podState) phase() podPhase {
	s.mu.Lock()
	defer s.mu.Unlock()
	return podPhase{Reason: s.podReason, Message: s.podMessage, Terminating: s.terminating, Terminated: s.terminated, Finished: s.finished}
}

// running marks the pod as one that runs (neither being killed nor
// killed) and forgets the waiting reasons of containers that are not
// about to start: whatever they waited for is over.
func (s *podState) running(starting []containerToStart) {
	keep := map[string]bool{}
	for _, ts := range starting {
		keep[ts.Spec.Name] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terminating, s.terminated, s.finished = false, false, false
	for name := range s.waiting {
		if !keep[name] {
			delete(s.waiting, name)
		}
	}
}

// killing marks the pod as being killed.
func (s *podState) killing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terminating, s.terminated, s.finished = true, false, false
}

// killed marks the pod as stopped: nothing waits any more.
func (s *podState) killed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terminating, s.terminated = false, true
	s.waiting = map[string]*waitError{}
}

// replacedAgain counts one more replacement of container name's
// interrupted start and says whether that is more than max.
func (s *podState) replacedAgain(name string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaced[name]++
	return s.replaced[name] > max
}

// deadline is what is known of the pod's active deadline: whether it was
// killed for passing it, and its start time (zero until known).
func (s *podState) deadline() (exceeded bool, start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadlineExceeded, s.startTime
}

// setStartTime records the pod's status.startTime (it never changes).
func (s *podState) setStartTime(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startTime = t
}

// exceedDeadline records that the pod passed its active deadline: it
// stays past.
func (s *podState) exceedDeadline() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadlineExceeded = true
}
