package bus_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
)

// apiOp is one $JS.API.> operation as a credential would try it.
type apiOp struct {
	name string
	// subject and body for credential c on stream s.
	subject func(c, s string) string
	body    func(c, s string) any
	// allowed is the expected outcome, the table of bus/doc.go: readable
	// says whether s is among the streams c may read.
	allowed func(c, s string, readable bool) bool
}

func never(string, string, bool) bool     { return false }
func ifReadable(_, _ string, r bool) bool { return r }
func consumerName(c string) string        { return "t-" + c }
func apiSubj(f string) func(c, s string) string {
	return func(c, s string) string {
		return "$JS.API." + strings.NewReplacer("<s>", s, "<n>", consumerName(c), "<c>", c).Replace(f)
	}
}

// lastMsg asks for a message every stream holds: its last on a subject
// seed wrote (KV buckets keep only the last revision in some).
func lastMsg(_, s string) any {
	if b, ok := strings.CutPrefix(s, "KV_"); ok {
		return map[string]any{"last_by_subj": bus.KVSubject(b, "p")}
	}
	return map[string]any{"seq": 1}
}

var apiOps = []apiOp{
	{"INFO", apiSubj("INFO"), nil, never},
	{"STREAM.CREATE", apiSubj("STREAM.CREATE.<s>"), func(c, s string) any { return map[string]any{"name": s, "subjects": []string{"x." + c}} }, never},
	{"STREAM.UPDATE", apiSubj("STREAM.UPDATE.<s>"), func(c, s string) any { return map[string]any{"name": s, "subjects": []string{"x." + c}} }, never},
	{"STREAM.NAMES", apiSubj("STREAM.NAMES"), nil, never},
	{"STREAM.LIST", apiSubj("STREAM.LIST"), nil, never},
	{"STREAM.INFO", apiSubj("STREAM.INFO.<s>"), nil, ifReadable},
	{"STREAM.MSG.GET", apiSubj("STREAM.MSG.GET.<s>"), lastMsg, ifReadable},
	{"DIRECT.GET", apiSubj("DIRECT.GET.<s>"), lastMsg, ifReadable},
	{"STREAM.MSG.DELETE", apiSubj("STREAM.MSG.DELETE.<s>"), func(c, s string) any { return map[string]any{"seq": 1} }, never},
	{"STREAM.PURGE", apiSubj("STREAM.PURGE.<s>"), nil, never},
	{"STREAM.SNAPSHOT", apiSubj("STREAM.SNAPSHOT.<s>"), func(c, s string) any { return map[string]any{"deliver_subject": bus.InboxPrefix(c) + ".snap"} }, never},
	{"STREAM.RESTORE", apiSubj("STREAM.RESTORE.<s>"), func(c, s string) any { return map[string]any{"config": map[string]any{"name": s}} }, never},
	{"STREAM.LEADER.STEPDOWN", apiSubj("STREAM.LEADER.STEPDOWN.<s>"), nil, never},
	{"CONSUMER.CREATE pull", apiSubj("CONSUMER.CREATE.<s>.<n>"), func(c, s string) any {
		return map[string]any{"stream_name": s, "config": map[string]any{"name": consumerName(c), "ack_policy": "explicit", "inactive_threshold": int64(time.Minute)}}
	}, ifReadable},
	{"CONSUMER.CREATE push to own inbox", apiSubj("CONSUMER.CREATE.<s>.<n>p"), func(c, s string) any {
		return map[string]any{"stream_name": s, "config": map[string]any{"name": consumerName(c) + "p", "deliver_subject": bus.InboxPrefix(c) + ".push", "ack_policy": "none"}}
	}, ifReadable},
	{"CONSUMER.CREATE push elsewhere", apiSubj("CONSUMER.CREATE.<s>.<n>q"), func(c, s string) any {
		return map[string]any{"stream_name": s, "config": map[string]any{"name": consumerName(c) + "q", "deliver_subject": "nodelet.v1.elsewhere", "ack_policy": "none"}}
	}, never},
	// Durables: only the ones the declaration names (status's events
	// consumer, on its copies of the events), and nobody else's.
	{"CONSUMER.DURABLE.CREATE own undeclared name", apiSubj("CONSUMER.DURABLE.CREATE.<s>.nodelet-<c>-t"), func(c, s string) any {
		return map[string]any{"stream_name": s, "config": map[string]any{"durable_name": "nodelet-" + c + "-t", "ack_policy": "explicit"}}
	}, never},
	{"CONSUMER.DURABLE.CREATE status's name", apiSubj("CONSUMER.DURABLE.CREATE.<s>.nodelet-status-events"), func(c, s string) any {
		return map[string]any{"stream_name": s, "config": map[string]any{"durable_name": "nodelet-status-events", "ack_policy": "explicit"}}
	}, func(c, s string, r bool) bool {
		return r && c == bus.Status && strings.HasPrefix(s, "NODELET_V1_STATUS_EVENTS_")
	}},
	{"CONSUMER.NAMES", apiSubj("CONSUMER.NAMES.<s>"), nil, never},
	{"CONSUMER.LIST", apiSubj("CONSUMER.LIST.<s>"), nil, never},
	{"CONSUMER.INFO", apiSubj("CONSUMER.INFO.<s>.<n>"), nil, ifReadable},
	{"CONSUMER.MSG.NEXT", apiSubj("CONSUMER.MSG.NEXT.<s>.<n>"), func(c, s string) any { return map[string]any{"batch": 1, "expires": int64(2 * time.Second)} }, ifReadable},
	{"CONSUMER.PAUSE", apiSubj("CONSUMER.PAUSE.<s>.<n>"), nil, never},
	{"CONSUMER.LEADER.STEPDOWN", apiSubj("CONSUMER.LEADER.STEPDOWN.<s>.<n>"), nil, never},
	{"CONSUMER.DELETE", apiSubj("CONSUMER.DELETE.<s>.<n>"), nil, ifReadable},
	{"ACCOUNT.PURGE", apiSubj("ACCOUNT.PURGE.<c>"), nil, never},
	{"SERVER.REMOVE", apiSubj("SERVER.REMOVE"), nil, never},
	{"META.LEADER.STEPDOWN", apiSubj("META.LEADER.STEPDOWN"), nil, never},
}

// The access matrix of bus/doc.go, written out once more by hand: what
// each credential writes and which streams it reads. The bus derives its
// accounts from the declaration in internal/component; this table is the
// statement of intent it is held to, so a change to the declaration that
// widens or narrows anyone's access fails here until the doc and this table
// say the same.
var (
	writeTable = map[string][]string{
		bus.Sources:   {bus.BucketDesired, bus.BucketSources},
		bus.Admission: {bus.BucketAdmission},
		bus.Runtime:   {bus.BucketObserved, bus.BucketRuntime},
		bus.Prober:    {bus.BucketProbes},
		bus.Status:    {bus.BucketStatus, bus.BucketNode},
		bus.GC:        {bus.BucketPressure, bus.BucketEvictions, bus.BucketImages},
		bus.Devices:   {bus.BucketDevices},
	}
	allBuckets = []string{bus.BucketDesired, bus.BucketSources, bus.BucketAdmission, bus.BucketObserved,
		bus.BucketRuntime, bus.BucketProbes, bus.BucketStatus, bus.BucketNode, bus.BucketPressure,
		bus.BucketEvictions, bus.BucketImages, bus.BucketDevices}
	readTable = map[string][]string{
		bus.Sources:   kv(bus.BucketDesired, bus.BucketSources),
		bus.Admission: kv(bus.BucketDesired, bus.BucketAdmission, bus.BucketObserved, bus.BucketPressure, bus.BucketRuntime, bus.BucketDevices),
		bus.Devices:   kv(bus.BucketDesired, bus.BucketSources, bus.BucketAdmission, bus.BucketObserved, bus.BucketDevices),
		bus.Runtime: kv(bus.BucketDesired, bus.BucketSources, bus.BucketAdmission, bus.BucketObserved,
			bus.BucketRuntime, bus.BucketProbes, bus.BucketEvictions, bus.BucketStatus, bus.BucketDevices),
		bus.Prober: kv(bus.BucketDesired, bus.BucketObserved, bus.BucketProbes),
		bus.Status: append(kv(bus.BucketDesired, bus.BucketAdmission, bus.BucketObserved,
			bus.BucketRuntime, bus.BucketProbes, bus.BucketStatus, bus.BucketNode, bus.BucketPressure,
			bus.BucketEvictions, bus.BucketDevices), events("NODELET_V1_STATUS_EVENTS_")...),
		bus.GC: kv(bus.BucketDesired, bus.BucketSources, bus.BucketObserved, bus.BucketPressure,
			bus.BucketEvictions, bus.BucketImages),
		bus.KubeletServer: kv(bus.BucketDesired, bus.BucketRuntime, bus.BucketStatus),
		bus.Supervisor:    nil,
		bus.Tap:           append(kv(allBuckets...), events("NODELET_V1_EVENTS_")...),
	}
	// Every component that publishes events, each on a stream of its own.
	eventProducers = []string{bus.Sources, bus.Admission, bus.Devices, bus.Runtime, bus.Prober, bus.Status,
		bus.KubeletServer, bus.GC, bus.Supervisor}
)

func events(prefix string) []string {
	var out []string
	for _, p := range eventProducers {
		out = append(out, prefix+strings.ToUpper(p))
	}
	return out
}

func kv(buckets ...string) []string {
	var out []string
	for _, b := range buckets {
		out = append(out, "KV_"+b)
	}
	return out
}

// TestAccessTableMatchesDeclaration: the accounts the bus derives from the
// declaration give each credential exactly the writes and reads of the
// table above.
func TestAccessTableMatchesDeclaration(t *testing.T) {
	var creds []string
	for c := range readTable {
		creds = append(creds, c)
	}
	sort.Strings(creds)
	var clients []string
	for _, c := range bus.Components {
		if c != bus.BusAdmin {
			clients = append(clients, c)
		}
	}
	sort.Strings(clients)
	if strings.Join(creds, ",") != strings.Join(clients, ",") {
		t.Errorf("credentials %v, the table has %v", clients, creds)
	}
	for _, c := range creds {
		want := append([]string(nil), readTable[c]...)
		sort.Strings(want)
		if got := bus.ReadableStreams(c); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s reads %v, the table says %v", c, got, want)
		}
	}
	if got, want := strings.Join(bus.EventProducers, ","), strings.Join(eventProducers, ","); got != want {
		t.Errorf("event producers %s, the table says %s", got, want)
	}
	owners := map[string]string{}
	for c, bs := range writeTable {
		for _, b := range bs {
			owners[b] = c
		}
	}
	if len(bus.Buckets) != len(allBuckets) || len(owners) != len(allBuckets) {
		t.Errorf("buckets %v, the table has %d with %d owners", bus.Buckets, len(allBuckets), len(owners))
	}
	for _, b := range bus.Buckets {
		if owners[b.Name] != b.Owner {
			t.Errorf("bucket %s written by %s, the table says %s", b.Name, b.Owner, owners[b.Name])
		}
	}
}

// TestJetStreamAPIMatrix tries every operation of $JS.API.> with every
// credential on every stream and checks exactly which succeed: those of
// the access table in bus/doc.go, on the streams the credential reads.
func TestJetStreamAPIMatrix(t *testing.T) {
	b := bustest.Start(t)
	seed(t, b)
	emitEverywhere(t, b)
	streams := append(events("NODELET_V1_EVENTS_"), events("NODELET_V1_STATUS_EVENTS_")...)
	for _, bk := range bus.Buckets {
		streams = append(streams, "KV_"+bk.Name)
	}
	var (
		mu       sync.Mutex
		mismatch []string
		wg       sync.WaitGroup
	)
	for _, cred := range nonOwners("") {
		readable := map[string]bool{}
		for _, s := range readTable[cred] {
			readable[s] = true
		}
		for _, s := range streams {
			c := newRefusals(b.Connect(cred))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, op := range apiOps {
					var data []byte
					if op.body != nil {
						data, _ = json.Marshal(op.body(cred, s))
					}
					// Refusals come back at once (an API error, no
					// responders, a permissions violation); the wait is
					// for answers on a loaded bus.
					m, err := c.request(op.subject(cred, s), data, 5*time.Second)
					got := err == nil && !isAPIError(m)
					if want := op.allowed(cred, s, readable[s]); got != want {
						why := fmt.Sprint(err)
						if err == nil {
							why = string(m.Data)
							if len(why) > 160 {
								why = why[:160]
							}
						}
						mu.Lock()
						mismatch = append(mismatch, fmt.Sprintf("%s %s on %s: succeeded=%v, want %v (%s)", cred, op.name, s, got, want, why))
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	sort.Strings(mismatch)
	for _, m := range mismatch {
		t.Error(m)
	}
}
