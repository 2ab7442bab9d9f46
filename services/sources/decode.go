package sources

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// maxManifestSize bounds a manifest file or URL body, as the kubelet's
// maxConfigLength does.
const maxManifestSize = 10 << 20

// manifestDecoder turns YAML or JSON into typed core/v1 objects. Only the
// core/v1 group is registered: a manifest holds a Pod or a PodList, and
// anything else is refused by kind. It is strict, so unknown and duplicate
// fields come back as a strict-decoding error next to a usable object; we
// report those as warnings and go on, as the kubelet (which is not strict)
// would accept the manifest. It is made on first use, not in init: the
// daemons are one executable, so every package's init runs in every
// daemon's process, and this scheme is only nodelet-sources' (170 KB).
var manifestDecoder = sync.OnceValue(func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
})

// manifest is what one file or URL body holds.
type manifest struct {
	// Pods in the order written. They are decoded only: no defaults, no
	// identity, not validated.
	Pods []*corev1.Pod
	// Warnings name fields the decoder did not know (typos, fields of a
	// newer API) or saw twice. The manifest is still used.
	Warnings []string
}

// errEmptyManifest is returned for a manifest with no content.
var errEmptyManifest = errors.New("manifest is empty")

// decodeManifest decodes a Pod or a PodList, written in YAML or JSON. The
// error says what is wrong in words a person editing the file can act on.
func decodeManifest(data []byte) (*manifest, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("manifest is %d bytes, more than the limit of %d", len(data), maxManifestSize)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errEmptyManifest
	}
	obj, gvk, err := manifestDecoder().Decode(data, nil, nil)
	m := &manifest{}
	if err != nil {
		if obj == nil || !runtime.IsStrictDecodingError(err) {
			return nil, fmt.Errorf("cannot decode manifest: %w", err)
		}
		if strict, ok := runtime.AsStrictDecodingError(err); ok {
			for _, e := range strict.Errors() {
				m.Warnings = append(m.Warnings, e.Error())
			}
		} else {
			m.Warnings = append(m.Warnings, err.Error())
		}
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		m.Pods = []*corev1.Pod{o}
	case *corev1.PodList:
		for i := range o.Items {
			p := o.Items[i]
			m.Pods = append(m.Pods, &p)
		}
	default:
		kind := "unknown"
		if gvk != nil {
			kind = gvk.String()
		}
		return nil, fmt.Errorf("manifest holds %s, not a v1 Pod or PodList", kind)
	}
	return m, nil
}
