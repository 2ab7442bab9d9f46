package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

const (
	// creatorKey is the consumer metadata the proxy sets to the credential
	// that made the consumer: what its per-credential limit counts, and
	// who alone may update it.
	creatorKey = "nodelet_creator"
	// maxAckPending and maxWaiting bound what one consumer may hold: the
	// server's own defaults, which no nodelet client exceeds.
	maxAckPending = 1000
	maxWaiting    = 512
	// maxEphemeralInactive bounds how long an ephemeral consumer outlives
	// its reader (nats.go's ordered consumers ask for 5 minutes).
	maxEphemeralInactive = 10 * time.Minute
	// proxyQueue bounds the requests of one credential waiting for the
	// proxy; more are refused at once, so a flood of requests delays only
	// the credential that sends it. proxyWorkers serve each credential's
	// queue (a daemon starting makes a consumer per bucket at once); they
	// start with the requests and end when the queue is empty, so that a
	// bus at rest holds no goroutine per component for them.
	proxyQueue   = 64
	proxyWorkers = 8
)

// requestInfo returns the identity nats-server stamped on a request that
// crossed a service import into the proxy account, from the request's raw
// header block. The server appends its Nats-Request-Info line at the end of
// the block, after removing the copies it recognises (those led by CRLF).
// A client can still hide lines from the server behind a bare CR or LF,
// which other parsers (nats.go among them) split on, or leave its last
// line open so that the server's line is glued to it. So the block must be
// strictly CRLF-delimited, hold exactly one Nats-Request-Info (in any case)
// and hold it last, and the value must be exactly the JSON the server
// writes for a ClientInfo.
func requestInfo(hdr []byte) (*server.ClientInfo, error) {
	s := string(hdr)
	body, ok := strings.CutSuffix(s, "\r\n\r\n")
	if !ok || !strings.HasPrefix(s, "NATS/1.0") {
		return nil, errNoRequestInfo
	}
	lines := strings.Split(body, "\r\n")
	found, last := 0, false
	var value string
	for i, l := range lines {
		if strings.ContainsAny(l, "\r\n") {
			return nil, errors.New("bare CR or LF in the request's header block")
		}
		k, v, ok := strings.Cut(l, ":")
		if i == 0 || !ok || !strings.EqualFold(strings.TrimSpace(k), server.ClientInfoHdr) {
			continue
		}
		found++
		value, last = strings.TrimSpace(v), i == len(lines)-1
	}
	if found != 1 || !last {
		return nil, fmt.Errorf("%d %s lines in the request's header block, the bus's not alone and last", found, server.ClientInfoHdr)
	}
	var ci server.ClientInfo
	if err := json.Unmarshal([]byte(value), &ci); err != nil {
		return nil, fmt.Errorf("%s: %w", server.ClientInfoHdr, err)
	}
	if again, err := json.Marshal(&ci); err != nil || string(again) != value {
		return nil, fmt.Errorf("%s is not as the bus writes it", server.ClientInfoHdr)
	}
	return &ci, nil
}

// consumerRule says why a consumer request is refused, or "" when it may
// go. durable is the request's durable name, if any.
func (m Matrix) consumerRule(component, subject string, req *server.CreateConsumerRequest) string {
	stream, name, ok := parseCreateSubject(subject)
	if !ok {
		return "not a consumer create subject"
	}
	allowed := false
	for _, s := range m.ReadableStreams(component) {
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
	cfg := &req.Config
	if d := cfg.DeliverSubject; d != "" && !strings.HasPrefix(d, InboxPrefix(component)+".") {
		return fmt.Sprintf("deliver subject %q is outside %s's inbox %s.>", d, component, InboxPrefix(component))
	}
	if cfg.Direct || cfg.Sourcing {
		return "direct and sourcing consumers are the server's own"
	}
	if cfg.MaxAckPending < 0 || cfg.MaxAckPending > maxAckPending {
		return fmt.Sprintf("max_ack_pending %d is over the bus's %d", cfg.MaxAckPending, maxAckPending)
	}
	if cfg.MaxWaiting < 0 || cfg.MaxWaiting > maxWaiting {
		return fmt.Sprintf("max_waiting %d is over the bus's %d", cfg.MaxWaiting, maxWaiting)
	}
	// A durable is one the declaration names for the requester, on a
	// stream it consumes that way; every other consumer is ephemeral. A
	// name that looks like a durable's is taken by nobody else.
	durable := cfg.Durable != "" || strings.Contains(subject, ".DURABLE.")
	for _, n := range []string{name, cfg.Name, cfg.Durable} {
		if strings.HasPrefix(n, "nodelet-") && !m.durableAllowed(component, stream, n) {
			return fmt.Sprintf("consumer %q is no durable the declaration gives %s on %s", n, component, stream)
		}
	}
	if durable && !m.durableAllowed(component, stream, firstNonEmpty(cfg.Durable, name)) {
		return fmt.Sprintf("%s declares no durable consumer %q on %s", component, firstNonEmpty(cfg.Durable, name), stream)
	}
	if !durable && cfg.InactiveThreshold > maxEphemeralInactive {
		return fmt.Sprintf("inactive_threshold %s is over the bus's %s", cfg.InactiveThreshold, maxEphemeralInactive)
	}
	return ""
}

// durableAllowed tells whether component may keep the durable consumer
// name on stream: its declared events durable on its copies of the events.
func (m Matrix) durableAllowed(component, stream, name string) bool {
	d := m.get(component).EventsDurable
	return d != "" && name == d && m.readsEvents(component) && strings.HasPrefix(stream, statusEventsStreamPrefix)
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

// proxy serves consumer requests: it listens through a bare protocol
// connection (the raw header blocks, see requestInfo) and answers and
// forwards through nc, both in the proxy account.
type proxy struct {
	nc     *nats.Conn
	dial   func() (*wire, error)
	log    *slog.Logger
	limits Limits
	// store is a JetStream context in each store account: the proxy lists
	// consumers there to count and to find their creators.
	store map[string]jetstream.JetStream

	mu     sync.Mutex
	queues map[string]chan wireMsg // by component
	// workers are the goroutines serving each component's queue now, at
	// most proxyWorkers.
	workers map[string]int
	w       *wire
	closed  bool
	// creators and held are the proxy's count: who made each consumer,
	// how many each credential holds. Every consumer the proxy makes is
	// added; the ones that went are found when a credential reaches its
	// limit (recount). inflight are the requests admitted and not yet
	// answered, which count against the limit too.
	creators map[consumerKey]string
	held     map[string]int
	inflight map[string]int
}

// run listens until close, dialling again if the server drops the
// listener (it is in-process: only a server shutting down does).
func (p *proxy) run() error {
	w, err := p.dial()
	if err != nil {
		return fmt.Errorf("bus: consumer proxy: %w", err)
	}
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>"} {
		if err := w.sub(subj, len(subj)); err != nil {
			_ = w.close()
			return fmt.Errorf("bus: consumer proxy: %w", err)
		}
	}
	p.mu.Lock()
	p.w = w
	p.mu.Unlock()
	go func() {
		for {
			m, err := w.next()
			if err != nil {
				p.mu.Lock()
				closed := p.closed
				p.mu.Unlock()
				if closed {
					return
				}
				p.log.Error("Consumer proxy lost its listener, listening again", "err", err)
				time.Sleep(100 * time.Millisecond)
				if err := p.run(); err != nil {
					p.log.Error("Consumer proxy cannot listen", "err", err)
				}
				return
			}
			p.dispatch(m)
		}
	}()
	return nil
}

func (p *proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.w != nil {
		_ = p.w.close()
	}
	for c, q := range p.queues {
		close(q) // its workers end
		delete(p.queues, c)
	}
}

// dispatch reads who asks and queues the request behind that credential's
// earlier ones.
func (p *proxy) dispatch(m wireMsg) {
	if m.Reply == "" {
		return
	}
	ci, err := requestInfo(m.Header)
	if err != nil {
		p.log.Warn("Refused consumer request", "subject", m.Subject, "reason", err)
		p.refuse(m, err.Error())
		return
	}
	component := declared.componentOfAccount(ci.Account)
	if component == "" || component == BusAdmin {
		p.refuse(m, "request from an account that holds no component")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	q, ok := p.queues[component]
	if !ok {
		q = make(chan wireMsg, proxyQueue)
		p.queues[component] = q
	}
	select {
	case q <- m:
	default:
		p.refuse(m, fmt.Sprintf("%s has %d consumer requests waiting already", component, proxyQueue))
		return
	}
	if p.workers[component] < proxyWorkers {
		p.workers[component]++
		go p.serve(component, q)
	}
}

// serve handles component's queued requests until the queue is empty or
// closed. A worker decides to end holding p.mu, under which dispatch
// queues and counts the workers: a request queued after that finds the
// count lowered and starts a worker of its own.
func (p *proxy) serve(component string, q chan wireMsg) {
	for {
		p.mu.Lock()
		select {
		case m, ok := <-q:
			p.mu.Unlock()
			if !ok {
				return
			}
			p.handle(component, m)
			continue
		default:
		}
		p.workers[component]--
		p.mu.Unlock()
		return
	}
}

// handle checks one request of component and forwards it.
func (p *proxy) handle(component string, m wireMsg) {
	var req server.CreateConsumerRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		p.refuse(m, "request does not decode: "+err.Error())
		return
	}
	why := declared.consumerRule(component, m.Subject, &req)
	if why == "" {
		why = p.admit(component, m.Subject, &req)
	}
	if why != "" {
		p.log.Warn("Refused consumer request", "credential", component, "subject", m.Subject, "reason", why)
		p.refuse(m, why)
		return
	}
	stream, _, _ := parseCreateSubject(m.Subject)
	body, err := json.Marshal(&req)
	if err != nil {
		p.made(component, stream, nil)
		p.refuse(m, "request does not encode: "+err.Error())
		return
	}
	// Only the body goes on: the server stamps the proxy's own identity.
	resp, err := p.nc.Request(proxyForward+m.Subject, body, 10*time.Second)
	if err != nil {
		p.made(component, stream, nil)
		p.refuse(m, "bus: "+err.Error())
		return
	}
	p.made(component, stream, resp.Data)
	_ = p.nc.Publish(m.Reply, resp.Data)
}

// consumerKey names a consumer.
type consumerKey struct{ stream, name string }

// admit applies what the declaration alone cannot say: the consumer is
// tagged with its creator, whom alone it answers to; a durable lives as
// long as the events it reads; and one credential holds at most
// Limits.ConsumersPerCredential consumers across all streams.
func (p *proxy) admit(component, subject string, req *server.CreateConsumerRequest) string {
	stream, name, _ := parseCreateSubject(subject)
	name = firstNonEmpty(name, req.Config.Durable, req.Config.Name)
	if req.Config.Metadata == nil {
		req.Config.Metadata = map[string]string{}
	}
	req.Config.Metadata[creatorKey] = component
	if req.Config.Durable != "" || strings.Contains(subject, ".DURABLE.") {
		req.Config.InactiveThreshold = p.limits.EventsMaxAge
	}
	// Admitted, a request counts as in flight until made settles it.
	admitted := func(held int) bool {
		if held >= p.limits.ConsumersPerCredential {
			return false
		}
		p.inflight[component]++
		return true
	}
	p.mu.Lock()
	by, known := p.creators[consumerKey{stream, name}]
	switch {
	case name != "" && known && by != component:
		p.mu.Unlock()
		return fmt.Sprintf("consumer %q on %s was made by another credential", name, stream)
	case name != "" && known:
		p.inflight[component]++ // an update: counted already
		p.mu.Unlock()
		return ""
	case admitted(p.held[component] + p.inflight[component]):
		p.mu.Unlock()
		return ""
	}
	p.mu.Unlock()
	// At the limit by the proxy's count, which hears of no consumer that
	// went (deleted, or inactive): count again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.recount(ctx); err != nil {
		return "bus: counting consumers: " + err.Error()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if held := p.held[component] + p.inflight[component]; !admitted(held) {
		return fmt.Sprintf("%s holds %d consumers, the most one credential may", component, held)
	}
	return ""
}

// made settles a request admit let through, with the server's answer (nil
// when it got none): a consumer the server made is component's.
func (p *proxy) made(component, stream string, answer []byte) {
	var r struct {
		Name  string    `json:"name"`
		Error *struct{} `json:"error"`
	}
	ok := json.Unmarshal(answer, &r) == nil && r.Error == nil && r.Name != ""
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight[component]--
	k := consumerKey{stream, r.Name}
	if _, known := p.creators[k]; ok && !known {
		p.creators[k] = component
		p.held[component]++
	}
}

// recount lists every consumer of every stream and who made it.
func (p *proxy) recount(ctx context.Context) error {
	creators := map[consumerKey]string{}
	held := map[string]int{}
	for _, s := range declared.allStreams() {
		js := p.store[storeAccountOf(s)]
		if js == nil {
			continue
		}
		st, err := js.Stream(ctx, s)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		l := st.ListConsumers(ctx)
		for info := range l.Info() {
			if by := info.Config.Metadata[creatorKey]; by != "" {
				creators[consumerKey{s, info.Name}] = by
				held[by]++
			}
		}
		if err := l.Err(); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.creators, p.held = creators, held
	p.mu.Unlock()
	return nil
}

// refuse answers m with a JetStream API error, which clients report as such.
func (p *proxy) refuse(m wireMsg, why string) {
	b, _ := json.Marshal(map[string]any{
		"type": "io.nats.jetstream.api.v1.consumer_create_response",
		"error": map[string]any{
			"code": 403, "err_code": 10003, "description": "nodelet-bus: " + why,
		},
	})
	_ = p.nc.Publish(m.Reply, b)
}

// inProcess dials the server in-process, for the proxy's listener.
func inProcess(ns *server.Server) (net.Conn, error) { return ns.InProcessConn() }
