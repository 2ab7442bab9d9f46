package pullmanager

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// writeRecordWhileMatchingLimit is the kubelet's: past this many secrets in
// a record, a match by hash or coordinates no longer adds the pod's secret.
const writeRecordWhileMatchingLimit = 100

// Credentials are what a pull record holds for an image
// (kubelet.config.k8s.io v1beta1 ImagePullCredentials).
type Credentials = kubeletv1beta1.ImagePullCredentials

// Secret is a pull secret's coordinates and the hash of its credential.
type Secret = kubeletv1beta1.ImagePullSecret

// ServiceAccount is the coordinates of a service account whose token a
// credential-provider plugin turned into the pull's credentials.
type ServiceAccount = kubeletv1beta1.ImagePullServiceAccount

// GetPodCredentials returns the pod's pull secrets that match the image,
// and the pod's service account when a credential-provider plugin in
// service-account token mode gave credentials for it (nil otherwise),
// looked up only when the decision needs them (the kubelet's).
type GetPodCredentials func() ([]Secret, *ServiceAccount, error)

// ImageLister lists CRI's images (the runtime's image service).
type ImageLister interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
}

// Manager is the kubelet's PullManager: pull intents and pulled records,
// and the verification decision.
type Manager struct {
	records *records
	policy  Policy
	log     *slog.Logger

	// One lock for the records and the counters (the kubelet stripes it
	// per image; nodelet's pulls are few).
	mu      sync.Mutex
	intents map[string]int32 // image → pulls in flight
}

// New opens the records under dir and turns the intents a previous run
// left for images that CRI now has into pulled records without
// credentials (the kubelet's PullManager.initialize): such an image was
// pulled by the node agent, so every pod's credentials are verified.
func New(ctx context.Context, dir string, policy Policy, images ImageLister, log *slog.Logger) (*Manager, error) {
	r, err := newRecords(dir)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{records: r, policy: policy, log: log, intents: map[string]int32{}}
	m.initialize(ctx, images)
	return m, nil
}

func (m *Manager) initialize(ctx context.Context, images ImageLister) {
	intents, err := m.records.listIntents()
	if err != nil {
		m.log.Error("There were errors listing ImagePullIntents, continuing with an incomplete records list", "err", err)
	}
	if len(intents) == 0 || images == nil {
		return
	}
	list, err := images.ListImages(ctx, nil)
	if err != nil {
		m.log.Error("Failed to list images", "err", err)
	}
	inFlight := map[string]bool{}
	for _, i := range intents {
		inFlight[i.Image] = true
	}
	for _, img := range list {
		for _, name := range slices.Concat(img.RepoDigests, img.RepoTags) {
			if !inFlight[name] {
				continue
			}
			if err := m.writePulledRecordIfChanged(name, img.Id, nil); err != nil {
				m.log.Error("Failed to write an image pull record", "imageRef", img.Id, "err", err)
				continue
			}
			if err := m.records.deleteIntent(name); err != nil {
				m.log.Info("Failed to remove image pull intent file", "imageName", name, "err", err)
			}
		}
	}
}

// RecordPullIntent is called before each pull of image; each call must be
// matched by one RecordImagePulled or RecordImagePullFailed.
func (m *Manager) RecordPullIntent(image string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.records.writeIntent(image); err != nil {
		return fmt.Errorf("failed to record image pull intent: %w", err)
	}
	m.intents[image]++
	return nil
}

// RecordImagePulled records that image (imageRef in CRI) was pulled with
// creds (the kubelet's RecordImagePulled).
func (m *Manager) RecordImagePulled(image, imageRef string, creds *Credentials) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.writePulledRecordIfChanged(image, imageRef, creds); err != nil {
		// The intent stays: the image still counts as pulled by the node,
		// and the next start turns the intent into a record.
		m.log.Error("Failed to write image pulled record", "imageRef", imageRef, "err", err)
		return
	}
	m.decrementIntent(image)
}

// RecordImagePullFailed drops one pull intent of image.
func (m *Manager) RecordImagePullFailed(image string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decrementIntent(image)
}

// decrementIntent is the kubelet's decrementImagePullIntent; m.mu held.
func (m *Manager) decrementIntent(image string) {
	if m.intents[image] <= 1 {
		if err := m.records.deleteIntent(image); err != nil {
			m.log.Error("Failed to remove image pull intent", "image", image, "err", err)
			return
		}
		delete(m.intents, image)
		return
	}
	m.intents[image]--
}

// writePulledRecordIfChanged is the kubelet's: a new record for imageRef
// (without credentials when creds is nil: they will be verified), or creds
// merged into its record under image without tag or digest; m.mu held.
func (m *Manager) writePulledRecordIfChanged(image, imageRef string, creds *Credentials) error {
	sanitized, err := TrimImageTagDigest(image)
	if err != nil {
		return fmt.Errorf("invalid image name %q: %w", image, err)
	}
	rec, _, err := m.records.getPulled(imageRef)
	if err != nil {
		m.log.Info("Failed to retrieve an ImagePulledRecord", "image", image, "err", err)
		rec = nil
	}
	changed := false
	if rec == nil {
		changed = true
		rec = &kubeletv1beta1.ImagePulledRecord{
			LastUpdatedTime:   metav1.Now(),
			ImageRef:          imageRef,
			CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{},
		}
		if creds != nil {
			rec.CredentialMapping[sanitized] = *creds
		}
	} else {
		rec, changed = mergeNewCreds(rec, sanitized, creds)
	}
	if !changed {
		return nil
	}
	return m.records.writePulled(rec)
}

// MustAttemptImagePull is the kubelet's: whether a pod must pull image
// (imageRef on the node) rather than use it. true when the policy wants
// verification and no record shows the pod's credentials, or node-wide
// ones, pulled it. A pod's secret matches a recorded one by the hash of
// its credential, or by its coordinates (then its new hash is recorded).
// An unreadable record means pull (fail safe), and an error of
// getPodCredentials is returned with true.
func (m *Manager) MustAttemptImagePull(image, imageRef string, getPodCredentials GetPodCredentials) (bool, error) {
	if imageRef == "" {
		return true, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, exists, err := m.records.getPulled(imageRef)
	if err != nil {
		m.log.Error("Unable to access cache records about image pulls", "image", image, "err", err)
		return true, nil
	}
	pulledByNode := exists || m.intents[image] > 0
	if !pulledByNode {
		if pulledByNode, err = m.records.intentExists(image); err != nil {
			m.log.Error("Unable to access cache records about image pulls", "image", image, "err", err)
			return true, nil
		}
	}
	if !m.policy(image, pulledByNode) {
		return false, nil
	}
	if rec == nil {
		return true, nil
	}
	sanitized, err := TrimImageTagDigest(image)
	if err != nil {
		m.log.Error("Failed to parse image name, forcing image credentials reverification", "image", image, "err", err)
		return true, nil
	}
	cached, ok := rec.CredentialMapping[sanitized]
	if !ok {
		return true, nil
	}
	if cached.NodePodsAccessible {
		return false, nil
	}
	if len(cached.KubernetesSecrets) == 0 && len(cached.KubernetesServiceAccounts) == 0 {
		return true, nil
	}
	podSecrets, podServiceAccount, err := getPodCredentials()
	if err != nil {
		return true, err
	}
	for _, ps := range podSecrets {
		for _, cs := range cached.KubernetesSecrets {
			hashesMatch := cs.CredentialHash != "" && ps.CredentialHash == cs.CredentialHash
			coordsMatch := ps.UID == cs.UID && ps.Namespace == cs.Namespace && ps.Name == cs.Name
			if hashesMatch {
				if !coordsMatch && len(cached.KubernetesSecrets) < writeRecordWhileMatchingLimit {
					// Another secret with the same credential: remember it.
					if err := m.writePulledRecordIfChanged(image, imageRef, &Credentials{KubernetesSecrets: []Secret{ps}}); err != nil {
						m.log.Error("Failed to write an image pulled record", "image", image, "imageRef", imageRef, "err", err)
					}
				}
				return false, nil
			}
			if coordsMatch && len(cached.KubernetesSecrets) < writeRecordWhileMatchingLimit {
				// The same secret, its credential since changed: the
				// kubelet trusts it and records the new hash.
				if err := m.writePulledRecordIfChanged(image, imageRef, &Credentials{KubernetesSecrets: []Secret{ps}}); err != nil {
					m.log.Error("Failed to write an image pulled record", "image", image, "imageRef", imageRef, "err", err)
				}
				return false, nil
			}
		}
	}
	// A service account whose token pulled the image before may use it.
	if podServiceAccount != nil && slices.Contains(cached.KubernetesServiceAccounts, *podServiceAccount) {
		return false, nil
	}
	return true, nil
}

// PruneUnknownRecords is the kubelet's: after an image garbage collection
// that began at until, the pulled record of every image not in imageRefs
// (the images left) is removed, unless it was written since until.
func (m *Manager) PruneUnknownRecords(imageRefs []string, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	recs, err := m.records.listPulled()
	if err != nil {
		m.log.Error("There were errors listing ImagePulledRecords, garbage collection will proceed with incomplete records list", "err", err)
	}
	for _, rec := range recs {
		if !rec.LastUpdatedTime.Time.Before(until) || slices.Contains(imageRefs, rec.ImageRef) {
			continue
		}
		if err := m.records.deletePulled(rec.ImageRef); err != nil {
			m.log.Error("Failed to remove an ImagePulledRecord", "imageRef", rec.ImageRef, "err", err)
		}
	}
}

// mergeNewCreds is the kubelet's pulledRecordMergeNewCreds.
func mergeNewCreds(orig *kubeletv1beta1.ImagePulledRecord, image string, creds *Credentials) (*kubeletv1beta1.ImagePulledRecord, bool) {
	if creds == nil || !creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0 {
		return orig, false
	}
	selected, found := orig.CredentialMapping[image]
	if !found {
		ret := orig.DeepCopy()
		if ret.CredentialMapping == nil {
			ret.CredentialMapping = map[string]kubeletv1beta1.ImagePullCredentials{}
		}
		ret.CredentialMapping[image] = *creds
		ret.LastUpdatedTime = metav1.Now()
		return ret, true
	}
	if selected.NodePodsAccessible {
		return orig, false
	}
	switch {
	case creds.NodePodsAccessible:
		selected = kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	case len(creds.KubernetesSecrets) > 0:
		var changed bool
		if selected.KubernetesSecrets, changed = mergePullSecrets(selected.KubernetesSecrets, creds.KubernetesSecrets); !changed {
			return orig, false
		}
	case len(creds.KubernetesServiceAccounts) > 0:
		var changed bool
		if selected.KubernetesServiceAccounts, changed = mergePullServiceAccounts(selected.KubernetesServiceAccounts, creds.KubernetesServiceAccounts); !changed {
			return orig, false
		}
	default:
		return orig, false
	}
	ret := orig.DeepCopy()
	ret.CredentialMapping[image] = selected
	ret.LastUpdatedTime = metav1.Time{Time: time.Now()}
	return ret, true
}

// mergePullSecrets is the kubelet's: unique by coordinates, the new hash
// winning, sorted by namespace, name and UID.
func mergePullSecrets(orig, add []Secret) ([]Secret, bool) {
	type coords struct{ uid, ns, name string }
	set := map[coords]string{}
	for _, s := range orig {
		set[coords{s.UID, s.Namespace, s.Name}] = s.CredentialHash
	}
	changed := false
	for _, s := range add {
		k := coords{s.UID, s.Namespace, s.Name}
		if h, ok := set[k]; !ok || h != s.CredentialHash {
			changed = true
			set[k] = s.CredentialHash
		}
	}
	if !changed {
		return orig, false
	}
	ret := make([]Secret, 0, len(set))
	for k, h := range set {
		ret = append(ret, Secret{UID: k.uid, Namespace: k.ns, Name: k.name, CredentialHash: h})
	}
	slices.SortFunc(ret, func(a, b Secret) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
	return ret, true
}

// mergePullServiceAccounts is the kubelet's: unique, sorted by namespace,
// name and UID.
func mergePullServiceAccounts(orig, add []ServiceAccount) ([]ServiceAccount, bool) {
	ret := slices.Clone(orig)
	changed := false
	for _, s := range add {
		if !slices.Contains(ret, s) {
			ret, changed = append(ret, s), true
		}
	}
	if !changed {
		return orig, false
	}
	slices.SortFunc(ret, func(a, b ServiceAccount) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.UID, b.UID)
	})
	return ret, true
}
