package kubeletcompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/component-base/featuregate"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Loaded is the kubelet's command line and configuration, resolved as the
// kubelet resolves them (cmd/kubelet/app/server.go, NewKubeletCommand):
// defaults, then --config, then the --config-dir drop-ins, then the flags
// again on top.
type Loaded struct {
	Flags  *Flags
	Config *kubeletv1beta1.KubeletConfiguration
	// Set is the parsed command line: Changed says which flags were given.
	Set *pflag.FlagSet
	// Gates are the kubelet's feature gates with Config.FeatureGates applied.
	Gates featuregate.FeatureGate
}

// Given reports whether flag name was on the command line.
func (l *Loaded) Given(name string) bool {
	f := l.Set.Lookup(name)
	return f != nil && f.Changed
}

// Load parses args as the kubelet's command line and loads the
// configuration it names. Deprecation warnings go to stderr. With --help
// or --version it returns after parsing.
func Load(args []string, stderr io.Writer) (*Loaded, error) {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	setDefaults(kc, newGates())
	applyLegacyDefaults(kc)
	f := newFlags()
	set := newFlagSet(f, kc)
	set.SetOutput(stderr)
	set.Usage = func() {}
	l := &Loaded{Flags: f, Config: kc, Set: set}
	if err := set.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			f.Help = true
			return l, nil
		}
		return nil, fmt.Errorf("failed to parse kubelet flag: %w", err)
	}
	if rest := set.Args(); len(rest) > 0 {
		return nil, fmt.Errorf("unknown command %s", rest[0])
	}
	if f.Help || f.Version != "false" {
		return l, nil
	}
	if _, err := gatesFrom(kc.FeatureGates); err != nil {
		return nil, fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
	}
	if err := validateNodeLabels(f.NodeLabels); err != nil {
		return nil, fmt.Errorf("failed to validate kubelet flags: %w", err)
	}
	if f.Config != "" {
		var err error
		if kc, err = loadFile(f.Config, kc.FeatureGates); err != nil {
			return nil, fmt.Errorf("failed to load kubelet config file, path: %s, error: %w", f.Config, err)
		}
	}
	if f.ConfigDir != "" {
		if err := mergeDropins(kc, f.ConfigDir); err != nil {
			return nil, fmt.Errorf("failed to merge kubelet configs: %w", err)
		}
	}
	if f.Config != "" || f.ConfigDir != "" {
		// The flags again, over the file: into a fresh Flags, so that
		// values that accumulate are not doubled; the file's gates kept
		// beside the flags'.
		original := kc.FeatureGates
		again := newFlagSet(newFlags(), kc)
		again.SetOutput(io.Discard)
		if err := again.Parse(args); err != nil {
			return nil, fmt.Errorf("failed to precedence kubeletConfigFlag: %w", err)
		}
		for k, v := range original {
			if _, ok := kc.FeatureGates[k]; !ok {
				kc.FeatureGates[k] = v
			}
		}
	}
	g, err := gatesFrom(kc.FeatureGates)
	if err != nil {
		return nil, err
	}
	l.Config, l.Gates = kc, g
	return l, nil
}

var codecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	if err := kubeletv1beta1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict)
}()

// decodeStrict decodes a KubeletConfiguration document, refusing unknown
// and duplicate fields by name (the kubelet falls back to a lenient
// decode with a warning; nodelet never ignores a field).
func decodeStrict(data []byte) (*kubeletv1beta1.KubeletConfiguration, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("the file is empty")
	}
	obj, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	kc, ok := obj.(*kubeletv1beta1.KubeletConfiguration)
	if !ok {
		return nil, fmt.Errorf("%v is not a %s KubeletConfiguration", gvk, kubeletv1beta1.SchemeGroupVersion)
	}
	return kc, nil
}

// loadFile is the kubelet's loadConfigFile: decode, default (with the
// flags' gates and the file's), relative paths made absolute against the
// file's directory, evictionHard defaulted or merged.
func loadFile(name string, flagGates map[string]bool) (*kubeletv1beta1.KubeletConfiguration, error) {
	path, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	kc, err := decodeStrict(data)
	if err != nil {
		return nil, err
	}
	merged := map[string]bool{}
	for k, v := range flagGates {
		merged[k] = v
	}
	for k, v := range kc.FeatureGates {
		merged[k] = v
	}
	g, err := gatesFrom(merged)
	if err != nil {
		return nil, err
	}
	setDefaults(kc, g)
	for _, p := range []*string{&kc.StaticPodPath, &kc.Authentication.X509.ClientCAFile, &kc.TLSCertFile,
		&kc.TLSPrivateKeyFile, kc.ResolverConfig, &kc.VolumePluginDir, &kc.PodLogsDir} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(filepath.Dir(path), *p)
		}
	}
	if kc.EvictionHard == nil {
		kc.EvictionHard = defaultEvictionHard()
	} else if *kc.MergeDefaultEvictionSettings {
		for k, v := range defaultEvictionHard() {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
	return kc, nil
}

// mergeDropins is the kubelet's mergeKubeletConfigurations: every *.conf
// under dir (subdirectories too, in lexical order, as filepath.WalkDir
// goes) is a KubeletConfiguration merged as a JSON merge patch (RFC 7386)
// over kc, then kc is defaulted again. Other files are skipped.
func mergeDropins(kc *kubeletv1beta1.KubeletConfiguration, dir string) error {
	base, err := toObject(kc)
	if err != nil {
		return err
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(d.Name()) != ".conf" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Strictly first, for the field names; then as written, so that
		// only the fields it sets patch.
		if _, err := decodeStrict(data); err != nil {
			return fmt.Errorf("failed to load kubelet dropin file, path: %s, error: %w", path, err)
		}
		var patch map[string]any
		if err := yaml.Unmarshal(data, &patch); err != nil {
			return fmt.Errorf("failed to load kubelet dropin file, path: %s, error: %w", path, err)
		}
		base = mergePatch(base, patch).(map[string]any)
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to walk through kubelet dropin directory %q: %w", dir, err)
	}
	b, err := json.Marshal(base)
	if err != nil {
		return err
	}
	merged := &kubeletv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(b, merged); err != nil {
		return fmt.Errorf("failed to unmarshal merged JSON into kubelet configuration: %w", err)
	}
	g, err := gatesFrom(merged.FeatureGates)
	if err != nil {
		return err
	}
	setDefaults(merged, g)
	*kc = *merged
	return nil
}

func toObject(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// mergePatch applies an RFC 7386 JSON merge patch: objects merge key by
// key, null deletes, anything else replaces.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}
