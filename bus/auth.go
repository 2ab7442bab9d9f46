package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// reads lists the buckets each component reads (watches or gets). Writers
// read their own buckets too, to reconcile after a restart.
var reads = map[string][]string{
	Sources:    {BucketDesired, BucketSources},
	Admission:  {BucketDesired, BucketAdmission, BucketObserved, BucketPressure},
	Runtime:    {BucketDesired, BucketSources, BucketAdmission, BucketObserved, BucketRuntime, BucketProbes, BucketEvictions, BucketStatus},
	Prober:     {BucketDesired, BucketObserved, BucketProbes},
	Status:     {BucketDesired, BucketSources, BucketAdmission, BucketObserved, BucketRuntime, BucketProbes, BucketStatus, BucketNode, BucketPressure, BucketEvictions},
	GC:         {BucketDesired, BucketSources, BucketAdmission, BucketObserved, BucketRuntime, BucketStatus, BucketPressure, BucketEvictions, BucketImages},
	Supervisor: {},
}

// readsEvents lists the components that consume the events stream.
var readsEvents = map[string]bool{Status: true}

// readsHealth lists the components that subscribe to heartbeats.
var readsHealth = map[string]bool{Status: true, Supervisor: true}

// InboxPrefix is the reply-subject prefix of component's connection; each
// component may subscribe only under its own.
func InboxPrefix(component string) string { return "_INBOX_" + component }

func streamOf(bucket string) string { return kvStreamNamePrefix + bucket }

// readStream is what reading one stream needs: JetStream API calls scoped to
// the stream (info, ordered/durable consumers, direct get) and acks and
// flow-control replies for its consumers.
func readStream(stream string) []string {
	api := "$JS.API."
	return []string{
		api + "STREAM.INFO." + stream,
		api + "STREAM.MSG.GET." + stream,
		api + "DIRECT.GET." + stream,
		api + "DIRECT.GET." + stream + ".>",
		api + "CONSUMER.CREATE." + stream,
		api + "CONSUMER.CREATE." + stream + ".>",
		api + "CONSUMER.DURABLE.CREATE." + stream + ".>",
		api + "CONSUMER.INFO." + stream + ".>",
		api + "CONSUMER.DELETE." + stream + ".>",
		api + "CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.ACK." + stream + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// Permissions returns the bus permissions of component. It is the access
// matrix of the package documentation, in code.
func Permissions(component string) (*server.Permissions, error) {
	var pub, sub []string
	switch component {
	case BusAdmin:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}, nil
	case Tap:
		// Read-only: core subscriptions to everything, and JetStream calls
		// that only read (for replaying events and bucket history).
		pub = append(pub, "$JS.API.INFO")
		pub = append(pub, readStream(StreamEvents)...)
		for _, b := range Buckets {
			pub = append(pub, readStream(streamOf(b.Name))...)
		}
		sub = []string{">"}
		return perms(pub, sub), nil
	}
	bucketsRead, ok := reads[component]
	if !ok {
		return nil, fmt.Errorf("bus: unknown component %q", component)
	}
	pub = append(pub, "$JS.API.INFO")
	for _, b := range Buckets {
		if b.Owner == component {
			pub = append(pub, KVSubject(b.Name, ">"))
			pub = append(pub, readStream(streamOf(b.Name))...)
		}
	}
	for _, b := range bucketsRead {
		pub = append(pub, readStream(streamOf(b))...)
	}
	if readsEvents[component] {
		pub = append(pub, readStream(StreamEvents)...)
	}
	if component != Supervisor {
		pub = append(pub, HealthSubject(component))
	}
	pub = append(pub, subjectEventsBase+component+".>")
	sub = []string{InboxPrefix(component) + ".>"}
	if readsHealth[component] {
		sub = append(sub, SubjectHealthAll)
	}
	return perms(dedupe(pub), sub), nil
}

func perms(pub, sub []string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// CredentialsDir is where the bus keeps one NKey seed per component.
func CredentialsDir(stateDir string) string { return filepath.Join(stateDir, "credentials") }

// CredentialPath is the seed file of component.
func CredentialPath(stateDir, component string) string {
	return filepath.Join(CredentialsDir(stateDir), component+".nk")
}

// EnsureCredentials creates a user NKey for every component that has none
// (directory 0700, files 0600) and returns the public keys. Existing seeds
// are reused, so credentials survive bus restarts.
func EnsureCredentials(stateDir string) (map[string]string, error) {
	dir := CredentialsDir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials dir: %w", err)
	}
	pubs := map[string]string{}
	for _, c := range Components {
		path := CredentialPath(stateDir, c)
		seed, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, err
			}
			if seed, err = kp.Seed(); err != nil {
				return nil, err
			}
			if err := writeSecret(path, seed); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, fmt.Errorf("credential %s: %w", c, err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("credential %s (%s): %w", c, path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		pubs[c] = pub
	}
	return pubs, nil
}

func writeSecret(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// nkeyUsers builds the server's user list from the components' public keys.
func nkeyUsers(pubs map[string]string) ([]*server.NkeyUser, error) {
	var users []*server.NkeyUser
	for _, c := range Components {
		p, err := Permissions(c)
		if err != nil {
			return nil, err
		}
		users = append(users, &server.NkeyUser{Nkey: pubs[c], Permissions: p})
	}
	return users, nil
}
