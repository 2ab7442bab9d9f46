package bus

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The consumer proxy. A consumer's deliver subject is in its request body,
// where no subject permission can see it, and a push consumer delivers in
// the stream's account as the server itself: pointed at a captured subject
// it would store there, pointed at $JS.API.… it would call the API. So no
// client creates a consumer directly: components import CONSUMER.CREATE and
// CONSUMER.DURABLE.CREATE from the proxy account, and the bus, subscribed
// there, checks each request against the requester's account (which the
// server stamps on the request, Nats-Request-Info) before forwarding it to
// the stream's account.

// consumerRule says why a consumer request is refused, or "" when it may go.
func consumerRule(component, subject string, req *server.CreateConsumerRequest) string {
	stream, name, ok := parseCreateSubject(subject)
	if !ok {
		return "not a consumer create subject"
	}
	allowed := false
	for _, s := range ReadableStreams(component) {
		if s == stream {
			allowed = true
		}
	}
	if !allowed {
		return fmt.Sprintf("%s may not read stream %s", component, stream)
	}
	if req.Stream != "" && req.Stream != stream {
		return "stream in the request differs from the subject's"
	}
	cfg := req.Config
	if d := cfg.DeliverSubject; d != "" && !strings.HasPrefix(d, InboxPrefix(component)+".") {
		return fmt.Sprintf("deliver subject %q is outside %s's inbox %s.>", d, component, InboxPrefix(component))
	}
	if cfg.Direct || cfg.Sourcing {
		return "direct and sourcing consumers are the server's own"
	}
	// A durable — and any consumer named like one — belongs to the
	// component its name starts with; everyone else's consumers are
	// ephemeral with random names.
	for _, n := range []string{name, cfg.Name, cfg.Durable} {
		if n == "" {
			continue
		}
		if strings.HasPrefix(n, "nodelet-") && !strings.HasPrefix(n, "nodelet-"+component+"-") {
			return fmt.Sprintf("consumer %q belongs to another component", n)
		}
	}
	durable := cfg.Durable != "" || strings.Contains(subject, ".DURABLE.")
	if durable && !strings.HasPrefix(firstNonEmpty(cfg.Durable, name), "nodelet-"+component+"-") {
		return fmt.Sprintf("a durable consumer of %s must be named nodelet-%s-…", component, component)
	}
	return ""
}

// parseCreateSubject splits $JS.API.CONSUMER.[DURABLE.]CREATE.<stream>[.<name>[.<filter>]].
func parseCreateSubject(subject string) (stream, name string, ok bool) {
	rest, found := strings.CutPrefix(subject, "$JS.API.CONSUMER.CREATE.")
	if !found {
		if rest, found = strings.CutPrefix(subject, "$JS.API.CONSUMER.DURABLE.CREATE."); !found {
			return "", "", false
		}
	}
	parts := strings.SplitN(rest, ".", 3)
	if parts[0] == "" {
		return "", "", false
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	return parts[0], name, true
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if s != "" {
			return s
		}
	}
	return ""
}

// runProxy serves consumer requests on nc (a connection in the proxy
// account) until nc closes.
func runProxy(nc *nats.Conn, log *slog.Logger) error {
	handle := func(m *nats.Msg) { go proxyOne(nc, log, m) }
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>"} {
		if _, err := nc.Subscribe(subj, handle); err != nil {
			return fmt.Errorf("bus: consumer proxy: %w", err)
		}
	}
	return nc.Flush()
}

func proxyOne(nc *nats.Conn, log *slog.Logger, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var ci server.ClientInfo
	if err := json.Unmarshal([]byte(m.Header.Get(server.ClientInfoHdr)), &ci); err != nil {
		refuse(m, "no client information on the request")
		return
	}
	component := declared.componentOfAccount(ci.Account)
	if component == "" || component == BusAdmin {
		refuse(m, "request from an account that holds no component")
		return
	}
	var req server.CreateConsumerRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		refuse(m, "request does not decode: "+err.Error())
		return
	}
	if why := consumerRule(component, m.Subject, &req); why != "" {
		log.Warn("Refused consumer request", "credential", component, "subject", m.Subject, "reason", why)
		refuse(m, why)
		return
	}
	// Only the body goes on: the server stamps the proxy's own identity.
	resp, err := nc.Request(proxyForward+m.Subject, m.Data, 10*time.Second)
	if err != nil {
		refuse(m, "bus: "+err.Error())
		return
	}
	_ = m.Respond(resp.Data)
}

// refuse answers m with a JetStream API error, which clients report as such.
func refuse(m *nats.Msg, why string) {
	b, _ := json.Marshal(map[string]any{
		"type": "io.nats.jetstream.api.v1.consumer_create_response",
		"error": map[string]any{
			"code": 403, "err_code": 10003, "description": "nodelet-bus: " + why,
		},
	})
	_ = m.Respond(b)
}
