package bus

import (
	"fmt"
	"slices"
	"sort"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nodelet/nodelet/internal/component"
)

// Matrix is the bus's access table: who writes and reads what, derived
// from a component declaration (internal/component). The accounts, their
// imports and exports, and each connection's permissions all come from
// it; the bus runs with the one of component.Declared.
type Matrix struct {
	set component.Set
}

// MatrixOf derives the access table of a declaration.
func MatrixOf(s component.Set) Matrix { return Matrix{set: s} }

// declared is the matrix the bus runs with.
var declared = MatrixOf(component.Declared)

func (m Matrix) get(name string) component.Component {
	c, _ := m.set.Get(name)
	return c
}

func (m Matrix) names() []string { return m.set.Names() }

func (m Matrix) buckets() []BucketSpec {
	var out []BucketSpec
	for _, b := range m.set.Buckets() {
		out = append(out, BucketSpec{Name: b.Name, Owner: b.Owner, History: b.History})
	}
	return out
}

func (m Matrix) reads(c string) []string   { return m.get(c).Reads }
func (m Matrix) readsEvents(c string) bool { return m.get(c).EventsDurable != "" }
func (m Matrix) readsHealth(c string) bool { return m.get(c).ReadsHealth }

// emitsEvents tells whether component publishes events (on its own
// events stream).
func (m Matrix) emitsEvents(c string) bool { return m.get(c).Events }

// eventProducers lists the components that publish events.
func (m Matrix) eventProducers() []string {
	var out []string
	for _, c := range m.clientComponents() {
		if m.emitsEvents(c) {
			out = append(out, c)
		}
	}
	return out
}

// beats tells whether component publishes heartbeats.
func (m Matrix) beats(c string) bool { return m.get(c).Heartbeats }

// clientComponents are the components whose clients connect with a seed
// from disk: everyone but the bus itself.
func (m Matrix) clientComponents() []string {
	var out []string
	for _, c := range m.set {
		if c.Credential() {
			out = append(out, c.Name)
		}
	}
	return out
}

// ownedBuckets lists the buckets component writes.
func (m Matrix) ownedBuckets(c string) []string {
	var out []string
	for _, b := range m.get(c).Writes {
		out = append(out, b.Name)
	}
	return out
}

// ReadableStreams lists the streams component may read (JetStream API
// calls scoped to the stream, consumers through the proxy), sorted.
func (m Matrix) ReadableStreams(c string) []string {
	var out []string
	if m.get(c).ReadsEverything {
		for _, b := range m.buckets() {
			out = append(out, streamOf(b.Name))
		}
		for _, p := range m.eventProducers() {
			out = append(out, EventsStream(p))
		}
	} else {
		seen := map[string]bool{}
		for _, b := range m.ownedBuckets(c) {
			seen[b] = true
		}
		for _, b := range m.reads(c) {
			seen[b] = true
		}
		for b := range seen {
			out = append(out, streamOf(b))
		}
		if m.readsEvents(c) {
			for _, p := range m.eventProducers() {
				out = append(out, StatusEventsStream(p))
			}
		}
	}
	sort.Strings(out)
	return out
}

// ReadableStreams is the declared matrix's ReadableStreams.
func ReadableStreams(c string) []string { return declared.ReadableStreams(c) }

// Permissions returns what component's clients may publish and subscribe
// to inside their own account. The account is the wall (see "Why
// accounts"); these lists say the same thing once more at the connection,
// so a mistake in one is caught by the other, and the access table test
// reads them.
func (m Matrix) Permissions(c string) (*server.Permissions, error) {
	if !slices.Contains(m.clientComponents(), c) {
		return nil, fmt.Errorf("bus: unknown component %q", c)
	}
	var pub, sub []string
	for _, b := range m.ownedBuckets(c) {
		pub = append(pub, KVSubject(b, ">"))
	}
	for _, s := range m.ReadableStreams(c) {
		for _, api := range streamAPI(s) {
			pub = append(pub, api.subject)
		}
		pub = append(pub, consumerCreateAPI(s)...)
	}
	if m.emitsEvents(c) {
		pub = append(pub, subjectEventsBase+c+".>")
	}
	if m.beats(c) {
		pub = append(pub, HealthSubject(c))
	}
	sub = []string{InboxPrefix(c) + ".>"}
	if m.readsHealth(c) {
		sub = append(sub, SubjectHealthAll)
	}
	if m.get(c).ReadsEverything {
		// Read-only: it sees every message its account imports.
		sub = []string{">"}
	}
	return perms(dedupe(pub), sub), nil
}

// Permissions is the declared matrix's Permissions.
func Permissions(c string) (*server.Permissions, error) { return declared.Permissions(c) }

// AccountsConfig renders the nats-server accounts of the matrix with
// placeholder keys: what a change to the declaration changes on the bus,
// for tests and `nodelet explain`-style listings.
func (m Matrix) AccountsConfig() string {
	pubs := map[string]string{}
	for _, c := range m.clientComponents() {
		pubs[c] = "U" + accountOf(c)
	}
	keys := busKeys{store: map[string]string{}, proxy: "UPROXY"}
	for _, a := range m.storeAccounts() {
		keys.store[a] = "U" + a
	}
	return m.accountsConfig(pubs, keys, DefaultLimits)
}
