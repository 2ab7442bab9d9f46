package bus

import (
	"fmt"
	"sort"
	"strings"
)

// The bus's accounts. Why accounts and not permissions alone is in the
// package documentation ("Why accounts"); this file declares them, derived
// from Buckets and the reads table, and renders them as nats-server
// configuration.

const (
	accountProxy  = "PROXY"
	accountEvents = "STORE_EVENTS"
	// proxyForward prefixes the subjects on which the proxy forwards a
	// checked consumer request to a store account.
	proxyForward = "nodelet.proxy."
)

// accountOf is the account of a component's clients.
func accountOf(component string) string { return strings.ToUpper(component) }

// componentOfAccount maps an account back to its component ("" if none).
func (m Matrix) componentOfAccount(account string) string {
	for _, c := range m.names() {
		if accountOf(c) == account {
			return c
		}
	}
	return ""
}

// isEventsStream tells whether stream is a producer's events stream or
// status's copy of one.
func isEventsStream(stream string) bool {
	return strings.HasPrefix(stream, eventsStreamPrefix) || strings.HasPrefix(stream, statusEventsStreamPrefix)
}

// storeAccountOf is the account that holds stream: a bucket's alone, or,
// for the events, every producer's stream and status's copies of them.
func storeAccountOf(stream string) string {
	if isEventsStream(stream) {
		return accountEvents
	}
	return "STORE_" + stream
}

// storeAccounts lists every store account, sorted.
func (m Matrix) storeAccounts() []string {
	out := []string{accountEvents}
	for _, b := range m.buckets() {
		out = append(out, storeAccountOf(streamOf(b.Name)))
	}
	sort.Strings(out)
	return out
}

// streamAPI lists the JetStream API subjects a reader of stream calls
// directly on the stream's account, with whether the response is a stream
// of messages. Consumer creation is not among them: it goes through the
// proxy.
func streamAPI(stream string) []apiImport {
	api := "$JS.API."
	return []apiImport{
		{api + "STREAM.INFO." + stream, false},
		{api + "STREAM.MSG.GET." + stream, false},
		{api + "DIRECT.GET." + stream, false},
		{api + "DIRECT.GET." + stream + ".>", false},
		{api + "CONSUMER.INFO." + stream + ".*", false},
		{api + "CONSUMER.DELETE." + stream + ".*", false},
		{api + "CONSUMER.MSG.NEXT." + stream + ".*", true},
		{"$JS.ACK." + stream + ".>", false},
		{"$JS.FC." + stream + ".>", false},
	}
}

// consumerCreateAPI lists the consumer creation subjects of stream, which
// readers import from the proxy and the proxy from the stream's account.
func consumerCreateAPI(stream string) []string {
	api := "$JS.API."
	return []string{
		api + "CONSUMER.CREATE." + stream,
		api + "CONSUMER.CREATE." + stream + ".>",
		api + "CONSUMER.DURABLE.CREATE." + stream + ".>",
	}
}

type apiImport struct {
	subject  string
	streamed bool
}

// busKeys are the public keys of the bus's own in-memory users: one admin
// per store account and the proxy. Their seeds never leave the process.
type busKeys struct {
	store map[string]string // store account → public key
	proxy string
}

// accountsConfig renders the accounts block of nats-server's configuration:
// every account with its users, exports and imports. pubs holds the
// components' public keys.
func (m Matrix) accountsConfig(pubs map[string]string, keys busKeys, l Limits) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	readersOf := map[string][]string{} // stream → reader accounts
	for _, c := range m.clientComponents() {
		for _, s := range m.ReadableStreams(c) {
			readersOf[s] = append(readersOf[s], accountOf(c))
		}
	}
	healthReaders := []string{accountOf(Tap)}
	for _, c := range m.clientComponents() {
		if m.readsHealth(c) {
			healthReaders = append(healthReaders, accountOf(c))
		}
	}
	list := func(accts []string) string {
		qs := make([]string, len(accts))
		for i, a := range accts {
			qs[i] = q(a)
		}
		return "[" + strings.Join(qs, ", ") + "]"
	}

	w("accounts {\n")
	// Store accounts: the streams, no clients but the bus's admin.
	for _, acct := range m.storeAccounts() {
		w("  %s {\n    jetstream: enabled\n    users: [{nkey: %s}]\n    exports: [\n", q(acct), q(keys.store[acct]))
		var streams []string
		for _, s := range m.eventsStreams() {
			if storeAccountOf(s) == acct {
				streams = append(streams, s)
			}
		}
		for _, bk := range m.buckets() {
			if storeAccountOf(streamOf(bk.Name)) == acct {
				streams = append(streams, streamOf(bk.Name))
				// The owner writes.
				w("      {service: %s, accounts: [%s]}\n", q(KVSubject(bk.Name, ">")), q(accountOf(bk.Owner)))
			}
		}
		if acct == accountEvents {
			for _, c := range m.clientComponents() {
				if m.emitsEvents(c) {
					w("      {service: %s, accounts: [%s]}\n", q(subjectEventsBase+c+".>"), q(accountOf(c)))
				}
			}
			// See jsInfoImport.
			w("      {service: %s, accounts: %s}\n", q(jsInfo), list(append(m.componentAccounts(), accountProxy)))
		}
		inboxes := map[string]bool{}
		for _, s := range streams {
			for _, api := range streamAPI(s) {
				if len(readersOf[s]) == 0 {
					continue
				}
				rt := ""
				if api.streamed {
					rt = ", response_type: stream"
				}
				w("      {service: %s, accounts: %s%s}\n", q(api.subject), list(readersOf[s]), rt)
			}
			for _, subj := range consumerCreateAPI(s) {
				w("      {service: %s, accounts: [%s]}\n", q(subj), q(accountProxy))
			}
			for _, r := range readersOf[s] {
				inboxes[r] = true
			}
		}
		// Push consumers deliver into the reader's inbox space, which only
		// that reader receives.
		for _, r := range sortedKeys(inboxes) {
			w("      {stream: %s, accounts: [%s]}\n", q(InboxPrefix(m.componentOfAccount(r))+".>"), q(r))
		}
		w("    ]\n  }\n")
	}

	// The proxy: checks every consumer create/update, then forwards it.
	w("  %s {\n    users: [{nkey: %s}]\n    exports: [\n", q(accountProxy), q(keys.proxy))
	var all []string
	for _, c := range m.clientComponents() {
		if len(m.ReadableStreams(c)) > 0 {
			all = append(all, accountOf(c))
		}
	}
	w("      {service: \"$JS.API.CONSUMER.CREATE.>\", accounts: %s}\n", list(all))
	w("      {service: \"$JS.API.CONSUMER.DURABLE.CREATE.>\", accounts: %s}\n", list(all))
	w("    ]\n    imports: [\n")
	w("      %s\n", jsInfoImport())
	for _, s := range m.allStreams() {
		for _, subj := range consumerCreateAPI(s) {
			w("      {service: {account: %s, subject: %s}, to: %s}\n", q(storeAccountOf(s)), q(subj), q(proxyForward+subj))
		}
	}
	w("    ]\n  }\n")

	// Component accounts: one client each; they hold no stream.
	for _, c := range m.clientComponents() {
		acct := accountOf(c)
		w("  %s {\n    users: [{nkey: %s}]\n", q(acct), q(pubs[c]))
		// One account per credential: these are the credential's limits.
		w("    limits: {max_connections: %d, max_subscriptions: %d}\n", l.ConnectionsPerCredential, l.SubscriptionsPerCredential)
		// What the component publishes, tap sees live. The exports are
		// here, where the client publishes, because nats-server never
		// passes a message that came in through a service import (as every
		// write to a store account does) on to a stream export.
		w("    exports: [\n")
		if m.beats(c) {
			w("      {stream: %s, accounts: %s}\n", q(HealthSubject(c)), list(without(healthReaders, acct)))
		}
		for _, bk := range m.ownedBuckets(c) {
			w("      {stream: %s, accounts: [%s]}\n", q(KVSubject(bk, ">")), q(accountOf(Tap)))
		}
		if m.emitsEvents(c) {
			w("      {stream: %s, accounts: [%s]}\n", q(subjectEventsBase+c+".>"), q(accountOf(Tap)))
		}
		w("    ]\n")
		w("    imports: [\n")
		w("      %s\n", jsInfoImport())
		for _, bk := range m.ownedBuckets(c) {
			w("      {service: {account: %s, subject: %s}}\n", q(storeAccountOf(streamOf(bk))), q(KVSubject(bk, ">")))
		}
		if m.emitsEvents(c) {
			w("      {service: {account: %s, subject: %s}}\n", q(accountEvents), q(subjectEventsBase+c+".>"))
		}
		inboxFrom := map[string]bool{}
		for _, s := range m.ReadableStreams(c) {
			for _, api := range streamAPI(s) {
				w("      {service: {account: %s, subject: %s}}\n", q(storeAccountOf(s)), q(api.subject))
			}
			for _, subj := range consumerCreateAPI(s) {
				w("      {service: {account: %s, subject: %s}}\n", q(accountProxy), q(subj))
			}
			inboxFrom[storeAccountOf(s)] = true
		}
		for _, a := range sortedKeys(inboxFrom) {
			w("      {stream: {account: %s, subject: %s}}\n", q(a), q(InboxPrefix(c)+".>"))
		}
		if c == Tap {
			for _, bk := range m.buckets() {
				w("      {stream: {account: %s, subject: %s}}\n", q(accountOf(bk.Owner)), q(KVSubject(bk.Name, ">")))
			}
			for _, d := range m.clientComponents() {
				if m.emitsEvents(d) {
					w("      {stream: {account: %s, subject: %s}}\n", q(accountOf(d)), q(subjectEventsBase+d+".>"))
				}
			}
		}
		if m.readsHealth(c) || c == Tap {
			for _, d := range m.clientComponents() {
				if m.beats(d) && d != c {
					w("      {stream: {account: %s, subject: %s}}\n", q(accountOf(d)), q(HealthSubject(d)))
				}
			}
		}
		w("    ]\n  }\n")
	}
	w("}\n")
	return b.String()
}

const jsInfo = "$JS.API.INFO"

// jsInfoImport is an import of $JS.API.INFO into an account without
// JetStream. Without one nats-server imports all of $JS.API.> from the
// system account into it, to answer "JetStream not enabled": that import
// would answer our imported API subjects too, racing the real answer.
func jsInfoImport() string {
	return fmt.Sprintf("{service: {account: %q, subject: %q}}", accountEvents, jsInfo)
}

func (m Matrix) componentAccounts() []string {
	var out []string
	for _, c := range m.clientComponents() {
		out = append(out, accountOf(c))
	}
	return out
}

// eventsStreams lists every producer's events stream and status's copy
// of each.
func (m Matrix) eventsStreams() []string {
	var out []string
	for _, p := range m.eventProducers() {
		out = append(out, EventsStream(p), StatusEventsStream(p))
	}
	return out
}

// allStreams lists every stream the bus holds.
func (m Matrix) allStreams() []string {
	out := m.eventsStreams()
	for _, b := range m.buckets() {
		out = append(out, streamOf(b.Name))
	}
	return out
}

func without(list []string, x string) []string {
	var out []string
	for _, s := range list {
		if s != x {
			out = append(out, s)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
