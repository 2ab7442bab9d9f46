// Package bus is nodelet's node-local message bus: the embedded nats-server
// with JetStream (nodelet-bus), the connection every component uses, the
// name of every subject and bucket, and typed helpers over the schemas.
//
// # State
//
// Each pipeline stage is a JetStream KV bucket with exactly one writer.
// Readers watch it. Lifecycle events go on the NODELET_V1_EVENTS stream;
// heartbeats are plain publishes on nodelet.v1.health.<component>.
//
// # Access matrix
//
// Every client authenticates with its own NKey (created by the bus at first
// start under <stateDir>/credentials, 0600 files in a 0700 directory).
// Anonymous connections are refused. Each credential may publish only what
// its component owns and read only what it needs:
//
//	component   writes (KV buckets / subjects)             reads (buckets, streams, subjects)
//	sources     pods_desired, sources,                     pods_desired, sources
//	            events.sources.>, health.sources
//	admission   pods_admission, events.admission.>,        pods_desired, pods_admission,
//	            health.admission                           pods_observed, pressure
//	runtime     pods_observed, runtime,                    pods_desired, sources, pods_admission,
//	            events.runtime.>, health.runtime           pods_observed, runtime, probes, evictions,
//	                                                       pods_status (a pod's start time)
//	prober      probes, events.prober.>, health.prober     pods_desired, pods_observed, probes
//	status      pods_status, node, events.status.>,        every bucket but images; the events
//	            health.status                              stream; health.>
//	gc          pressure, evictions, images,               pods_desired, sources, pods_admission,
//	            events.gc.>, health.gc                     pods_observed, runtime, pods_status,
//	                                                       pressure, evictions, images
//	supervisor  events.supervisor.>                        health.>
//	tap         nothing                                    everything (core subscriptions to >,
//	                                                       read-only JetStream calls for replay)
//	bus         everything (creates the buckets)           everything
//
// Bucket names are nodelet_v1_<name>, subjects nodelet.v1.<...>. "Reads"
// means: JetStream API calls scoped to that stream (info, consumers, direct
// get) and subscriptions under the component's own inbox prefix
// (_INBOX_<component>). Permissions builds this matrix; its tests check it
// against a running server.
package bus
