package bus

// Components that hold a bus credential. The seven daemons, the supervisor,
// the read-only tap, and the bus itself (which creates the buckets).
const (
	Sources       = "sources"
	Admission     = "admission"
	Runtime       = "runtime"
	Prober        = "prober"
	Status        = "status"
	GC            = "gc"
	KubeletServer = "server"
	Supervisor    = "supervisor"
	Tap           = "tap"
	BusAdmin      = "bus"
)

// Daemons lists the seven daemons in start order.
var Daemons = []string{Sources, Admission, Runtime, Prober, Status, GC, KubeletServer}

// Components lists everyone that holds a credential.
var Components = []string{Sources, Admission, Runtime, Prober, Status, GC, KubeletServer, Supervisor, Tap, BusAdmin}

// Subject prefix of every nodelet subject; the version is the schemas' major.
const Prefix = "nodelet.v1."

// Buckets. Every bucket has exactly one writer, named in Owner.
const (
	BucketDesired   = "nodelet_v1_pods_desired"   // key pod UID → schemas.PodDesired
	BucketSources   = "nodelet_v1_sources"        // key "ready" → schemas.SourcesReady
	BucketAdmission = "nodelet_v1_pods_admission" // key pod UID → schemas.AdmissionVerdict
	BucketObserved  = "nodelet_v1_pods_observed"  // key pod UID → schemas.PodObserved
	BucketRuntime   = "nodelet_v1_runtime"        // key "state" → schemas.RuntimeState
	BucketProbes    = "nodelet_v1_probes"         // key <uid>.<container>.<kind> → schemas.ProbeResult
	BucketStatus    = "nodelet_v1_pods_status"    // key pod UID → schemas.PodStatusRecord
	BucketNode      = "nodelet_v1_node"           // key "node" → schemas.NodeRecord
	BucketPressure  = "nodelet_v1_pressure"       // key "node" → schemas.NodePressure
	BucketEvictions = "nodelet_v1_evictions"      // key pod UID → schemas.PodEviction
	BucketImages    = "nodelet_v1_images"         // key image ID (sanitised) → schemas.ImageRecord
)

// Well-known keys of the single-value buckets.
const (
	KeySourcesReady = "ready"
	KeyRuntimeState = "state"
	KeyNode         = "node"
	KeyPressure     = "node"
)

// BucketSpec describes a bucket: its writer and how much history it keeps.
type BucketSpec struct {
	Name    string
	Owner   string
	History uint8
}

// Buckets lists every bucket with its single writer.
var Buckets = []BucketSpec{
	{BucketDesired, Sources, 5},
	{BucketSources, Sources, 1},
	{BucketAdmission, Admission, 5},
	{BucketObserved, Runtime, 10},
	{BucketRuntime, Runtime, 5},
	{BucketProbes, Prober, 5},
	{BucketStatus, Status, 10},
	{BucketNode, Status, 1},
	{BucketPressure, GC, 5},
	{BucketEvictions, GC, 1},
	{BucketImages, GC, 1},
}

// The events stream holds every lifecycle event, subject
// nodelet.v1.events.<component>.<podUID|"node">.
const (
	StreamEvents       = "NODELET_V1_EVENTS"
	SubjectEventsAll   = Prefix + "events.>"
	SubjectHealthAll   = Prefix + "health.>"
	subjectEventsBase  = Prefix + "events."
	subjectHealthBase  = Prefix + "health."
	eventsMaxAgeHours  = 24
	eventsMaxMessages  = 200000
	kvSubjectPrefix    = "$KV."
	kvStreamNamePrefix = "KV_"
)

// EventSubject is where component publishes an event about object (a pod UID
// or "node").
func EventSubject(component, object string) string {
	if object == "" {
		object = "node"
	}
	return subjectEventsBase + component + "." + object
}

// HealthSubject is where component publishes its heartbeat.
func HealthSubject(component string) string { return subjectHealthBase + component }

// KVSubject is the subject a put to bucket/key is published on.
func KVSubject(bucket, key string) string { return kvSubjectPrefix + bucket + "." + key }

// ProbeKey is the probes bucket key of one probe of one container.
func ProbeKey(podUID, container, kind string) string {
	return podUID + "." + container + "." + kind
}

// Owner returns the single writer of bucket, or "" for an unknown bucket.
func Owner(bucket string) string {
	for _, b := range Buckets {
		if b.Name == bucket {
			return b.Owner
		}
	}
	return ""
}
