package runtime

import (
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

func TestExitedContainer(t *testing.T) {
	anyOf := func(typeURL string, m proto.Message) *anypb.Any {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return &anypb.Any{TypeUrl: typeURL, Value: b}
	}
	for _, tc := range []struct {
		name string
		env  *eventsapi.Envelope
		want string
	}{
		{"init process exit", &eventsapi.Envelope{Topic: topicTaskExit, Event: anyOf("containerd.events.TaskExit", &apievents.TaskExit{ContainerID: "c1", ID: "c1", ExitStatus: 7})}, "c1"},
		{"exit without process id", &eventsapi.Envelope{Topic: topicTaskExit, Event: anyOf("containerd.events.TaskExit", &apievents.TaskExit{ContainerID: "c1"})}, "c1"},
		{"exec'd process exit", &eventsapi.Envelope{Topic: topicTaskExit, Event: anyOf("containerd.events.TaskExit", &apievents.TaskExit{ContainerID: "c1", ID: "exec-42"})}, ""},
		{"oom", &eventsapi.Envelope{Topic: topicTaskOOM, Event: anyOf("containerd.events.TaskOOM", &apievents.TaskOOM{ContainerID: "c2"})}, "c2"},
		{"other topic", &eventsapi.Envelope{Topic: "/tasks/start", Event: anyOf("containerd.events.TaskStart", &apievents.TaskStart{ContainerID: "c3"})}, ""},
		{"topic and type disagree", &eventsapi.Envelope{Topic: topicTaskExit, Event: anyOf("containerd.events.TaskStart", &apievents.TaskStart{ContainerID: "c3"})}, ""},
		{"payload that does not decode", &eventsapi.Envelope{Topic: topicTaskExit, Event: &anypb.Any{TypeUrl: "containerd.events.TaskExit", Value: []byte{0xff, 0xff}}}, ""},
		{"no event", &eventsapi.Envelope{Topic: topicTaskExit}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitedContainer(tc.env); got != tc.want {
				t.Fatalf("exitedContainer = %q, want %q", got, tc.want)
			}
		})
	}
}

// With a relist period far beyond the test (and the 30 s resync), a
// container's exit still reaches its observed state: containerd 1.6 has no
// CRI container events, so only its task events can have told the PLEG.
func TestContainerExitSeenThroughContainerdTaskEvents(t *testing.T) {
	h := newHarness(t, harnessOptions{configure: func(c *config.Config) { c.Runtime.RelistPeriod = time.Hour }})
	pod := newPod("exits", busybox("app", "sleep 2; exit 7"))
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	h.waitObserved(pod, 15*time.Second, "exit 7 seen", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c != nil && c.State.Terminated != nil && c.State.Terminated.ExitCode == 7
	})
}

func TestMajorVersion(t *testing.T) {
	for in, want := range map[string]int{"1.6.20~ds1": 1, "v2.1.4": 2, "": 0, "devel": 0, "10.0": 10} {
		if got := majorVersion(in); got != want {
			t.Errorf("majorVersion(%q) = %d, want %d", in, got, want)
		}
	}
}
