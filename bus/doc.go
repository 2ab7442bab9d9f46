// Package bus is nodelet's node-local message bus: the embedded nats-server
// with JetStream (nodelet-bus), the connection every component uses, the
// name of every subject and bucket, and typed helpers over the schemas.
//
// # State
//
// Each pipeline stage is a JetStream KV bucket with exactly one writer.
// Readers watch it. Lifecycle events go on a stream per producer,
// NODELET_V1_EVENTS_<COMPONENT>; heartbeats are plain publishes on
// nodelet.v1.health.<component>, and a heartbeat is the component's its
// subject names (HealthComponent), whatever its body says.
//
// # Mirrors
//
// A daemon's copy of another daemon's bucket is kept by a Mirror (Watch
// runs one): one callback hears, in order, the current value of every key,
// Synced, then each Put and Deleted; Reset when the bucket's stream was
// recreated (the bus's store was wiped — Update.Created and StreamCreated
// tell which store a value came from) or the watch was lost longer than
// it may resume after, followed by a fresh load and Synced.
// Apply keeps a map of the bucket from those updates. The daemon keeps only
// its callbacks; the one policy for a watch that ends is the Mirror's:
//
//   - A watch ends when the connection drops (the bus stopped or
//     restarted), when the bus closes it (its stream or consumer vanished
//     and nats.go could not recreate the ordered consumer), or when it
//     cannot be established (bucket or stream missing, JetStream not yet
//     up, permission refused). Run never returns for these; it returns
//     only when its context ends.
//   - It is re-established: at once after a watch that ran for a second or
//     more, otherwise after a back-off of 100ms doubling to 5s between
//     failed attempts (each bounded to 5s). A re-established watch resumes
//     after the last revision seen, or sends Reset and loads again when
//     the stream is a new one or the outage lasted past 5 minutes (the bus
//     drops a deleted key's history, its delete marker included, after
//     bus.deletedKeyRetention — at least 10 minutes — so a longer outage
//     could have missed a delete).
//   - An outage that lasts past the mirror's Grace (DefaultMirrorGrace,
//     2s; a plain reconnect is shorter) is reported on the connection
//     (Conn.Outages: "bus watch of <bucket> lost since <time>,
//     re-establishing: <cause>"). The daemon frame (internal/daemon) sends a
//     heartbeat at once that says not ready with that line, so
//     nodelet-server's /healthz fails for the daemon until the watch is
//     back, and the heartbeat after that says ready again. Every loss and
//     re-establishment is logged.
//
// # The promise
//
// No credential other than a bucket's owner can cause a message to be
// stored in that bucket, by any path: publish, reply subject, deliver
// subject, consumer management, acks, or any other $JS.API request. A
// durable consumer is usable by its owner only. And no credential can
// silence, impersonate or starve another (issue 33):
//
//   - Events: each producer's are a stream of their own, with its own
//     share of bus.eventsMaxBytes, its own de-duplication window and a
//     64 KiB message limit. A message ID is only ever compared with IDs of
//     the one account that can publish into that stream, so no producer can
//     make another's event a "duplicate"; a flood evicts only the flooder's
//     own older events, in its stream and in status's copy of it.
//   - Identity: the consumer proxy takes the requester's account only from
//     the Nats-Request-Info line nats-server appended (requestInfo), never
//     from a copy a client hid in the header block.
//   - Limits: each credential (its account) may hold at most
//     Limits.ConnectionsPerCredential connections (64),
//     SubscriptionsPerCredential subscriptions (1024) and, through the
//     proxy, ConsumersPerCredential consumers on all streams (128). A
//     consumer holds at most 1000 unacknowledged messages and 512 waiting
//     pulls; an ephemeral one expires at most 10 minutes after its reader
//     went; durables are only those the declaration names, and expire with
//     the events they read (bus.eventsMaxAge). One credential's flood of
//     consumer requests waits in its own queue of 64 at the proxy.
//
// TestAttackSuite holds all of it: every credential against every bucket,
// events stream, status's copy and durable, and heartbeat subject the
// declaration gives another component (KV operations, the stream and
// consumer API, acks and flow control, reply and deliver subjects, raw
// header blocks, message IDs, rollups, sizes, floods), generated from the
// declaration, so what is declared tomorrow is attacked too.
//
// # Why accounts
//
// Subject permissions cannot keep that promise alone. nats-server checks a
// client's publish permissions against the subject it publishes on, not
// against the reply subject of a request nor the deliver subject inside a
// consumer's configuration; JetStream answers requests and delivers
// consumers' messages as the server itself, unchecked. Within one account
// any read-only credential could therefore have a stored message delivered
// onto $KV.<bucket>.<key> (a pull with that reply: the bucket stores it), or
// have a push consumer deliver onto $JS.API.STREAM.DELETE.<stream>. So the
// bus is split into nats-server accounts, built (accounts.go) from the
// Matrix that matrix.go derives from the component declaration
// (internal/component: each component's Writes, Reads, events and
// heartbeats):
//
//   - One store account per stream (STORE_KV_<bucket>; STORE_EVENTS holds
//     every producer's events stream and status's copy of each). No client connects there;
//     the bus's own admin user, whose key exists only in its memory, creates
//     the streams. In a store account the only subjects any stream captures
//     are that stream's own, and nats-server refuses a consumer whose deliver
//     subject overlaps its own stream ("deliver subject forms a cycle").
//   - One account per component, holding no stream. Everything a component
//     reaches in a store account is a service import: nats-server rewrites
//     the reply subject of every request crossing an import to a one-time
//     _R_ subject and carries the answer back into the requester's own
//     account, where no stream captures anything. A reply aimed at
//     $KV.<bucket>.<key> so lands as a plain message in the requester's
//     account and is stored nowhere.
//   - The owner of a bucket imports $KV.<bucket>.> from its store account:
//     the one way in. Each component imports nodelet.v1.events.<itself>.>
//     from STORE_EVENTS, so it can put events under its own name only.
//   - Consumers are made only by the proxy (proxy.go): components import
//     CONSUMER.CREATE and CONSUMER.DURABLE.CREATE from the PROXY account, not
//     from the store. The bus listens there on a bare protocol connection,
//     so that it sees each request's header block as nats-server stamped
//     it, and takes the requester's account from the one Nats-Request-Info
//     line the server appended: a block with a bare CR or LF, with a second
//     such line (in any case) or with that line not last, or whose value is
//     not the JSON the server writes, is refused. It refuses a deliver
//     subject outside the requester's inbox (_INBOX_<component>.), a
//     direct or sourcing consumer, a durable the declaration does not name
//     for the requester, and any consumer another credential made (each is
//     tagged with its creator, metadata nodelet_creator). Each store
//     account exports _INBOX_<reader>.> to that reader alone, so pushed
//     messages reach only the reader that asked.
//   - status's durable consumer nodelet-status-events is on each
//     NODELET_V1_STATUS_EVENTS_<PRODUCER>, a copy of that producer's events
//     that STORE_EVENTS sources from the producer's stream itself; only the
//     status account imports any API of them. tap and the others cannot
//     even address them.
//   - What a component publishes directly (its heartbeats, its KV writes and
//     events as they go out) is exported as a stream from its own account to
//     the readers that watch it live (tap; status and the supervisor for
//     heartbeats). nats-server never passes a message that came through a
//     service import on to a stream export, so these exports sit at the
//     writer's account.
//
// Each connection also carries subject permissions (Permissions) that allow
// exactly the imports of its account, so a mistake in one list shows in the
// other.
//
// # Who holds which seed
//
// The bus makes one seed per client component under
// <stateDir>/credentials (0700, the bus's user, nodelet-bus under the
// units). Its own admin key is made at every start and lives in its memory
// only; no file ever holds it. Each daemon gets its own seed alone: from
// systemd (LoadCredential=, in $CREDENTIALS_DIRECTORY, readable by the
// unit's user only) or from `nodelet up` (a copy in a private directory,
// the child's own with supervisor.componentUsers). Under the units every
// daemon but the runtime runs as a user of its own (internal/component
// declares each, with its groups and capabilities), in a mount namespace
// that hides the directory of seeds and the other units' credentials; a
// unit's /run/credentials directory is its user's (0500). The runtime
// stays root in the host's mount namespace, without CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH, so those directories — the others' users', the
// bus's 0700 one — stay closed to it. TestUnitsUnderSystemd
// (internal/e2e) checks under a real systemd each daemon's uid and that it
// can read its own seed and no other.
//
// # Known limits
//
//   - A reader that guesses the random name of another reader's ephemeral
//     consumer on a stream both read can send flow-control replies to it,
//     pull from it, or inspect and delete it (CONSUMER.INFO|DELETE|
//     MSG.NEXT and $JS.FC are imported per stream, and a consumer name is
//     one subject token, so no import can narrow them to the requester's
//     own names); it cannot update it (the proxy checks the creator).
//     That can stall the other reader's watch, which then starts over; it
//     can store nothing anywhere. Closing it would need the proxy to answer
//     those requests too, checking the consumer's creator.
//   - The whole store is shared: the streams' maxima are reserved from it
//     (bus.maxStore must hold them all), so no stream can take another's
//     room, but the disk under the store can still fill from elsewhere.
//   - The runtime runs as root in the host's mount namespace (its tmpfs
//     volumes must reach containerd, and systemd cannot re-establish
//     propagation from a private namespace to the host) and keeps
//     CAP_CHOWN and CAP_FOWNER (fsGroup, volumes of any user): it cannot
//     read another's seed as it stands, but it could take a file's
//     ownership or mode to. Like every user of the CRI socket (group
//     nodelet-cri under the units), it could also run a privileged
//     container that mounts the state dir. The seeds keep the daemons
//     apart from each other and from anything unprivileged; they do not
//     keep a compromised runtime, nor any root process on the node, out.
//   - Without CAP_DAC_OVERRIDE the runtime cannot list a directory a
//     container left in a volume that shuts others out (0700 of another
//     uid); to tear such a pod down it takes each such directory over
//     first (chown and chmod, volumes.RemoveAll), as its CAP_CHOWN and
//     CAP_FOWNER allow.
//   - Under `nodelet up` no mount namespace hides the seeds: the children
//     of their own users (supervisor.componentUsers) get no capability,
//     and gc and the runtime, root there, can read every seed.
//
// # Access matrix
//
// Every client authenticates with its own NKey (created by the bus at first
// start under <stateDir>/credentials, 0600 files created O_EXCL|O_NOFOLLOW,
// fsynced, in a 0700 directory, owner checked; see "Who holds which seed").
// Anonymous connections are refused.
//
//	component   writes (KV buckets / subjects)             reads (streams)
//	sources     pods_desired, sources,                     pods_desired, sources
//	            events.sources.>, health.sources
//	admission   pods_admission, events.admission.>,        pods_desired, pods_admission,
//	            health.admission                           pods_observed, pressure, devices
//	devices     devices, events.devices.>,                 pods_desired, pods_admission, devices
//	            health.devices
//	runtime     pods_observed, runtime,                    pods_desired, sources, pods_admission,
//	            events.runtime.>, health.runtime           pods_observed, runtime, probes, evictions,
//	                                                       pods_status (a pod's start time), devices
//	prober      probes, events.prober.>, health.prober     pods_desired, pods_observed, probes
//	status      pods_status, node, events.status.>,        every bucket but images;
//	            health.status                              NODELET_V1_STATUS_EVENTS_*
//	gc          pressure, evictions, images,               pods_desired, sources, pods_admission,
//	            events.gc.>, health.gc                     pods_observed, runtime, pods_status,
//	                                                       pressure, evictions, images
//	server      events.server.>, health.server             pods_desired, runtime, pods_status;
//	                                                       health.>
//	supervisor  events.supervisor.>                        health.>
//	tap         nothing                                    every bucket, NODELET_V1_EVENTS_*, and live:
//	                                                       every KV write, event and heartbeat
//	bus         creates the streams (in-memory key)        -
//
// "Reads" a stream S means exactly these $JS.API operations, and no other
// $JS.API operation succeeds for any credential on any stream
// (TestJetStreamAPIMatrix tries them all):
//
//	STREAM.INFO.S, STREAM.MSG.GET.S, DIRECT.GET.S[.>]      answered by S's account
//	CONSUMER.INFO|DELETE|MSG.NEXT.S.<name>, $JS.ACK.S.>,   answered by S's account
//	$JS.FC.S.>
//	CONSUMER.CREATE.S[.<name>[.<filter>]],                 checked by the proxy: pull, or push
//	CONSUMER.DURABLE.CREATE.S.<name>                       into the own inbox; durables only
//	                                                       as declared (status's events)
//
// Refused to every credential: INFO, STREAM.CREATE|UPDATE|DELETE|PURGE|
// NAMES|LIST|MSG.DELETE|SNAPSHOT|RESTORE|LEADER.STEPDOWN, CONSUMER.NAMES|
// LIST|PAUSE|LEADER.STEPDOWN, ACCOUNT.*, SERVER.*, META.*, and consumers
// delivering anywhere but the requester's inbox.
//
// Bucket names are nodelet_v1_<name>, subjects nodelet.v1.<...>.
package bus
