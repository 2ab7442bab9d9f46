package bus

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/internal/component"
)

// Components that hold a bus credential, as internal/component declares
// them: the eight daemons, the supervisor, the read-only tap, and the bus
// itself (which creates the buckets).
const (
	Sources       = component.Sources
	Admission     = component.Admission
	Runtime       = component.Runtime
	Prober        = component.Prober
	Status        = component.Status
	GC            = component.GC
	KubeletServer = component.Server
	Devices       = component.Devices
	Supervisor    = component.Supervisor
	Tap           = component.Tap
	BusAdmin      = component.Bus
)

// Daemons lists the eight daemons in start order (derived from the
// declaration).
var Daemons = component.Declared.Daemons()

// Components lists everyone that holds a credential, and the bus.
var Components = component.Declared.Names()

// Subject prefix of every nodelet subject; the version is the schemas' major.
const Prefix = "nodelet.v1."

// Buckets (declared with their writers in internal/component).
const (
	BucketDesired   = component.BucketDesired
	BucketSources   = component.BucketSources
	BucketAdmission = component.BucketAdmission
	BucketObserved  = component.BucketObserved
	BucketRuntime   = component.BucketRuntime
	BucketProbes    = component.BucketProbes
	BucketStatus    = component.BucketStatus
	BucketNode      = component.BucketNode
	BucketPressure  = component.BucketPressure
	BucketEvictions = component.BucketEvictions
	BucketImages    = component.BucketImages
	BucketDevices   = component.BucketDevices
)

// Well-known keys of the single-value buckets.
const (
	KeySourcesReady = "ready"
	KeyRuntimeState = "state"
	KeyVolumeStats  = "volumestats"  // runtime bucket: schemas.PodVolumeStats
	KeyVolumesInUse = "volumesinuse" // runtime bucket: schemas.VolumesInUse
	KeyNode         = "node"
	KeyPressure     = "node"
	KeyDevices      = "resources" // devices bucket: schemas.DeviceResources
	KeyDRAHealth    = "drahealth" // devices bucket: schemas.DRAHealth
)

// BucketSpec describes a bucket: its writer and how much history it keeps.
type BucketSpec struct {
	Name    string
	Owner   string
	History uint8
}

// Buckets lists every bucket with its single writer, derived from the
// declaration.
var Buckets = declared.buckets()

// Events: each producer's go on a stream of its own,
// NODELET_V1_EVENTS_<COMPONENT>, subjects
// nodelet.v1.events.<component>.<podUID|"node">, with its own share of the
// store, de-duplication window and message size limit: no producer can
// drop (by message ID), replace or evict (by volume) another's events.
// Status consumes its own copy of each, NODELET_V1_STATUS_EVENTS_<COMPONENT>.
const (
	SubjectEventsAll         = Prefix + "events.>"
	SubjectHealthAll         = Prefix + "health.>"
	subjectEventsBase        = Prefix + "events."
	subjectHealthBase        = Prefix + "health."
	eventsMaxAgeHours        = 24
	eventsMaxMessages        = 200000
	eventsStreamPrefix       = "NODELET_V1_EVENTS_"
	statusEventsStreamPrefix = "NODELET_V1_STATUS_EVENTS_"
	kvSubjectPrefix          = "$KV."
	kvStreamNamePrefix       = "KV_"
)

// EventsStream is the stream that holds component's events.
func EventsStream(component string) string { return eventsStreamPrefix + strings.ToUpper(component) }

// StatusEventsStream is status's copy of component's events stream.
func StatusEventsStream(component string) string {
	return statusEventsStreamPrefix + strings.ToUpper(component)
}

// EventProducers lists the components that publish events, as declared.
var EventProducers = declared.eventProducers()

// EventStreams lists every producer's events stream, in the order of
// EventProducers.
func EventStreams() []string {
	out := make([]string, len(EventProducers))
	for i, c := range EventProducers {
		out[i] = EventsStream(c)
	}
	return out
}

// EventsProducer is the component whose events stream is stream, or ""
// when it is none.
func EventsProducer(stream string) string {
	for _, c := range EventProducers {
		if EventsStream(c) == stream {
			return c
		}
	}
	return ""
}

// EventsSubjectOf is the subject filter of component's events.
func EventsSubjectOf(component string) string { return subjectEventsBase + component + ".>" }

// EventSubject is where component publishes an event about object (a pod UID
// or "node"; "*" or ">" make it a filter). An object that is no valid key (a UID a manifest got wrong,
// reported in the very event that rejects it) is filed under "invalid":
// its subject could not be published, and the event would block those
// queued behind it.
func EventSubject(component, object string) string {
	switch {
	case object == "":
		object = "node"
	case object == "*" || object == ">":
		// A filter over every object.
	case ValidKey(object) != nil:
		object = "invalid"
	}
	return subjectEventsBase + component + "." + object
}

// ValidKey says why key cannot be a KV key, or nil: NATS's rules (letters,
// digits and -/_=. only; no empty token, so no leading or trailing dot
// and no ".."). Every bus key derives from input somewhere; checking it
// where the input is validated keeps one bad input from failing a write
// that others queue behind.
func ValidKey(key string) error {
	switch {
	case key == "":
		return errors.New("must not be empty")
	case strings.HasPrefix(key, ".") || strings.HasSuffix(key, "."):
		return errors.New("must not begin or end with '.'")
	case strings.Contains(key, ".."):
		return errors.New("must not contain '..'")
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-/_=.", r)) {
			return fmt.Errorf("must not contain %q (only letters, digits and -/_=.)", r)
		}
	}
	return nil
}

// IsRejected tells whether err is the bus refusing a value for good (too
// large, or a key it cannot store), as opposed to the bus being away:
// retrying the same write cannot succeed.
func IsRejected(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrInvalidKey) || errors.Is(err, nats.ErrBadSubject)
}

// HealthSubject is where component publishes its heartbeat.
func HealthSubject(component string) string { return subjectHealthBase + component }

// HealthComponent is the component whose heartbeats go on subject, or ""
// when subject is no heartbeat subject. A heartbeat belongs to the
// component of its subject, which only that component's credential may
// publish on; the name in its body is the sender's word.
func HealthComponent(subject string) string {
	c, ok := strings.CutPrefix(subject, subjectHealthBase)
	if !ok || c == "" || strings.ContainsAny(c, ".*>") {
		return ""
	}
	return c
}

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
