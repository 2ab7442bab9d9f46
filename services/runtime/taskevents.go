package runtime

import (
	"context"
	"fmt"
	"strings"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// criNamespace is the containerd namespace its CRI plugin keeps pods in.
const criNamespace = "k8s.io"

// Topics of containerd's task events that mean a container's process
// ended (the init process's exit, or an OOM kill about to end it).
const (
	topicTaskExit = "/tasks/exit"
	topicTaskOOM  = "/tasks/oom"
)

// watchTaskEvents follows containerd's own event service on the CRI
// endpoint, for runtimes that do not stream CRI container events
// (containerd 1.x answers GetContainerEvents with Unimplemented). An exit
// of a container's init process asks the PLEG for a relist at once and
// marks the container as pending until the relist sees it stopped (the
// CRI plugin handles the same event asynchronously, so the first relist
// may still see it running). Events are hints: the periodic relist stays
// the truth, and a lost event costs at most one relist period.
func (g *pleg) watchTaskEvents(ctx context.Context) {
	conn, err := grpc.NewClient(g.cfg.EndpointURL(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.log.Info("Cannot follow containerd's task events, relisting only", "err", err)
		return
	}
	defer conn.Close()
	client := eventsapi.NewEventsClient(conn)
	for {
		err := g.followTaskEvents(ctx, client)
		if ctx.Err() != nil {
			return
		}
		if isUnimplemented(err) {
			g.log.Info("The container runtime offers no containerd event service, relisting only", "relistPeriod", g.cfg.RelistPeriod)
			return
		}
		g.log.Warn("containerd task event stream ended, reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-g.clock.After(time.Second):
		}
	}
}

func (g *pleg) followTaskEvents(ctx context.Context, client eventsapi.EventsClient) error {
	var filters []string
	for _, t := range []string{topicTaskExit, topicTaskOOM} {
		filters = append(filters, fmt.Sprintf("topic==%q,namespace==%q", t, criNamespace))
	}
	sub, err := client.Subscribe(ctx, &eventsapi.SubscribeRequest{Filters: filters})
	if err != nil {
		return err
	}
	for {
		env, err := sub.Recv()
		if err != nil {
			return err
		}
		if id := exitedContainer(env); id != "" {
			g.containerExited(id)
		}
	}
}

// exitedContainer is the ID of the container whose init process an event
// says has ended, "" for anything else (an exec'd process's exit, e.g. an
// exec probe, is not the container's).
func exitedContainer(env *eventsapi.Envelope) string {
	ev := env.GetEvent()
	if ev == nil {
		return ""
	}
	switch {
	case env.GetTopic() == topicTaskExit && strings.HasSuffix(ev.GetTypeUrl(), "TaskExit"):
		var e apievents.TaskExit
		if proto.Unmarshal(ev.GetValue(), &e) != nil || e.ContainerID == "" {
			return ""
		}
		if e.ID != "" && e.ID != e.ContainerID {
			return ""
		}
		return e.ContainerID
	case env.GetTopic() == topicTaskOOM && strings.HasSuffix(ev.GetTypeUrl(), "TaskOOM"):
		var e apievents.TaskOOM
		if proto.Unmarshal(ev.GetValue(), &e) != nil {
			return ""
		}
		return e.ContainerID
	}
	return ""
}

// containerExited hands a container exit to the PLEG.
func (g *pleg) containerExited(id string) {
	select {
	case g.exits <- id:
	default:
		// The PLEG is behind; a plain relist finds the exit too.
		g.relistNow()
	}
}
