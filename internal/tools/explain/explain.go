// Package explain is `nodelet explain POD`: the story of one pod, told from
// what the bus keeps — the history of the pod's key in every stage's bucket
// (desired, admission verdict, observed runtime state, probe results,
// status, eviction) and every lifecycle event about it — merged in time
// order, ending with the stage that holds the pod now and why. It is the
// first thing an operator runs when a pod is stuck, so it only reads: it
// runs with the tap credential.
package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/tools/tap"
	"github.com/nodelet/nodelet/schemas"
)

// podBuckets are the buckets keyed by pod UID (probes: <uid>.<container>.<kind>).
var podBuckets = []string{bus.BucketDesired, bus.BucketAdmission, bus.BucketObserved,
	bus.BucketProbes, bus.BucketStatus, bus.BucketEvictions}

// nameBuckets carry the pod's namespace and name, to find a pod by name.
var nameBuckets = []string{bus.BucketDesired, bus.BucketAdmission, bus.BucketObserved, bus.BucketStatus}

// record is one stored revision of a pod's key, or one event.
type record struct {
	bucket  string // "" for an event
	key     string
	time    time.Time
	deleted bool
	env     *schemas.Envelope
	raw     []byte
}

// Entry is one line of the story.
type Entry struct {
	Time time.Time
	// Stage is the component whose write or event this is.
	Stage string
	Text  string
	// Warning marks trouble (rejection, failure, back-off, ...).
	Warning bool
}

// Story is what the bus knows of one pod.
type Story struct {
	UID, Namespace, Name string
	// Others are earlier pods of the same name (other UIDs).
	Others []string
	// Entries in time order.
	Entries []Entry
	// Truncated names the buckets whose history for this pod reached their
	// limit: older revisions are gone (events still tell).
	Truncated []string
	// NowStage holds the pod now; Now says why.
	NowStage, Now string
}

// Explain tells the story of pod: a UID, namespace/name or a name (any
// namespace; ambiguous names are an error naming the candidates).
func Explain(ctx context.Context, c *bus.Conn, pod string) (*Story, error) {
	pod = strings.TrimSpace(pod)
	if pod == "" {
		return nil, fmt.Errorf("explain: no pod named")
	}
	var recs []record
	var err error
	uid, others := "", []string(nil)
	// A UID is one subject token; a name may hold dots and is looked up.
	if !strings.Contains(pod, "/") && !strings.ContainsAny(pod, ".*> ") {
		if recs, err = load(ctx, c, pod); err != nil {
			return nil, err
		}
		if len(recs) > 0 {
			uid = pod
		}
	}
	if uid == "" {
		if uid, others, err = resolve(ctx, c, pod); err != nil {
			return nil, err
		}
		if recs, err = load(ctx, c, uid); err != nil {
			return nil, err
		}
	}
	s := &Story{UID: uid, Others: others}
	s.build(recs)
	return s, nil
}

// load reads every stored revision of the pod's keys and every event
// about it.
func load(ctx context.Context, c *bus.Conn, uid string) ([]record, error) {
	if strings.ContainsAny(uid, ".*> ") {
		return nil, fmt.Errorf("explain: %q is not a pod name, namespace/name or UID", uid)
	}
	var recs []record
	for _, b := range podBuckets {
		filter := bus.KVSubject(b, uid)
		if b == bus.BucketProbes {
			filter = bus.KVSubject(b, uid+".>")
		}
		err := tap.ReadStream(ctx, c, tap.BucketStream(b), []string{filter}, time.Time{}, func(st tap.Stored) {
			recs = append(recs, kvRecord(b, st))
		})
		if err != nil {
			return nil, err
		}
	}
	err := tap.ReadEvents(ctx, c, uid, time.Time{}, func(st tap.Stored) {
		r := record{time: st.Time, raw: st.Msg.Data}
		r.env, _ = schemas.Open(st.Msg.Data)
		recs = append(recs, r)
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

func kvRecord(bucket string, st tap.Stored) record {
	prefix := "$KV." + bucket + "."
	r := record{bucket: bucket, key: strings.TrimPrefix(st.Msg.Subject, prefix), time: st.Time, raw: st.Msg.Data}
	if st.Msg.Header != nil {
		if op := st.Msg.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			r.deleted = true
			return r
		}
	}
	r.env, _ = schemas.Open(st.Msg.Data)
	return r
}

// candidate is one pod UID seen under a name.
type candidate struct {
	uid, namespace, name string
	last                 time.Time
}

// resolve finds the UID of pod given as namespace/name or name, from the
// histories of the buckets that carry names. A name reused by a newer pod
// resolves to the newest; the older UIDs come back as others.
func resolve(ctx context.Context, c *bus.Conn, pod string) (string, []string, error) {
	ns, name, hasNS := strings.Cut(pod, "/")
	if !hasNS {
		ns, name = "", pod
	}
	cands := map[string]*candidate{}
	for _, b := range nameBuckets {
		err := tap.ReadStream(ctx, c, tap.BucketStream(b), []string{bus.KVSubject(b, ">")}, time.Time{}, func(st tap.Stored) {
			r := kvRecord(b, st)
			if r.deleted || r.env == nil {
				return
			}
			var meta struct {
				UID, Namespace, Name string
				Pod                  *struct {
					Metadata struct{ UID, Namespace, Name string } `json:"metadata"`
				} `json:"pod"`
			}
			if json.Unmarshal(r.env.Data, &meta) != nil {
				return
			}
			if meta.Pod != nil {
				meta.UID, meta.Namespace, meta.Name = meta.Pod.Metadata.UID, meta.Pod.Metadata.Namespace, meta.Pod.Metadata.Name
			}
			if meta.UID == "" {
				meta.UID = r.key
			}
			if meta.Name != name || (hasNS && meta.Namespace != ns) {
				return
			}
			cd := cands[meta.UID]
			if cd == nil {
				cd = &candidate{uid: meta.UID, namespace: meta.Namespace, name: meta.Name}
				cands[meta.UID] = cd
			}
			if r.time.After(cd.last) {
				cd.last = r.time
			}
		})
		if err != nil {
			return "", nil, err
		}
	}
	if len(cands) == 0 {
		return "", nil, fmt.Errorf("explain: no pod %q on the bus (give a name, namespace/name or UID; the buckets keep only recent revisions)", pod)
	}
	var list []*candidate
	namespaces := map[string]bool{}
	for _, cd := range cands {
		list = append(list, cd)
		namespaces[cd.namespace] = true
	}
	if len(namespaces) > 1 {
		var names []string
		for n := range namespaces {
			names = append(names, n+"/"+name)
		}
		sort.Strings(names)
		return "", nil, fmt.Errorf("explain: %q names several pods: %s; say which with namespace/name", pod, strings.Join(names, ", "))
	}
	sort.Slice(list, func(i, j int) bool { return list[i].last.After(list[j].last) })
	var others []string
	for _, cd := range list[1:] {
		others = append(others, cd.uid)
	}
	return list[0].uid, others, nil
}

// Write prints the story: a header, one line per entry, and the last line
// naming the stage that holds the pod now.
func (s *Story) Write(w io.Writer) error {
	var b strings.Builder
	if s.Name != "" {
		fmt.Fprintf(&b, "pod %s/%s uid %s\n", s.Namespace, s.Name, s.UID)
	} else {
		fmt.Fprintf(&b, "pod uid %s\n", s.UID)
	}
	if len(s.Others) > 0 {
		fmt.Fprintf(&b, "earlier pods of the same name: %s\n", strings.Join(s.Others, ", "))
	}
	for _, t := range s.Truncated {
		fmt.Fprintf(&b, "the bus kept only the last revisions of %s for this pod; events tell the older story\n", t)
	}
	layout := "15:04:05.000"
	if n := len(s.Entries); n > 0 && s.Entries[0].Time.Local().YearDay() != s.Entries[n-1].Time.Local().YearDay() {
		layout = "2006-01-02 15:04:05.000"
	}
	width := len(layout)
	for _, e := range s.Entries {
		mark := " "
		if e.Warning {
			mark = "!"
		}
		fmt.Fprintf(&b, "%-*s %s %-9s %s\n", width, e.Time.Local().Format(layout), mark, e.Stage, e.Text)
	}
	fmt.Fprintf(&b, "%-*s %s %-9s %s\n", width, "now", ">", s.NowStage, s.Now)
	_, err := io.WriteString(w, b.String())
	return err
}
