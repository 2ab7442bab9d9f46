package credentialprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1 "k8s.io/kubelet/config/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	credentialproviderv1alpha1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1alpha1"
	credentialproviderv1beta1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1beta1"
)

var (
	// codecs decode the provider configs and the plugins' answers. Built at
	// first use, not in an initialiser: every nodelet process (one
	// executable) would build and keep the scheme, and only the runtime
	// ever decodes with it.
	codecs = sync.OnceValue(func() serializer.CodecFactory {
		scheme := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{
			kubeletv1alpha1.AddToScheme, kubeletv1beta1.AddToScheme, kubeletv1.AddToScheme,
			credentialproviderv1alpha1.AddToScheme, credentialproviderv1beta1.AddToScheme, credentialproviderv1.AddToScheme,
		} {
			if err := add(scheme); err != nil {
				panic(err)
			}
		}
		return serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	})

	// apiVersions are the exec protocol's versions a provider may name,
	// the kubelet's.
	apiVersions = map[string]schema.GroupVersion{
		credentialproviderv1alpha1.SchemeGroupVersion.String(): credentialproviderv1alpha1.SchemeGroupVersion,
		credentialproviderv1beta1.SchemeGroupVersion.String():  credentialproviderv1beta1.SchemeGroupVersion,
		credentialproviderv1.SchemeGroupVersion.String():       credentialproviderv1.SchemeGroupVersion,
	}
)

// ReadConfig reads a CredentialProviderConfig file, or a directory of
// them (*.json, *.yaml, *.yml in lexical order, merged; a provider name
// twice is an error), and validates it. It also returns the SHA-256 of the
// files' contents, length-prefixed (sha256:<hex>), as the kubelet's
// readCredentialProviderConfig. Any kubelet.config.k8s.io version (v1alpha1,
// v1beta1, v1) is decoded strictly with its own type from k8s.io/kubelet
// and returned as v1 (their fields are the same).
func ReadConfig(path string) (*kubeletv1.CredentialProviderConfig, string, error) {
	if path == "" {
		return nil, "", fmt.Errorf("credential provider config path is empty")
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("unable to access path %q: %w", path, err)
	}
	var files []string
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read directory %q: %w", path, err)
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".json" || ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, "", fmt.Errorf("no configuration files found in directory %q", path)
		}
	} else {
		files = []string{path}
	}
	hasher := sha256.New()
	merged := &kubeletv1.CredentialProviderConfig{}
	names := sets.New[string]()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read file %q: %w", f, err)
		}
		_ = binary.Write(hasher, binary.BigEndian, uint64(len(data)))
		hasher.Write(data)
		cfg, err := decodeConfig(data)
		if err != nil {
			return nil, "", fmt.Errorf("error decoding config %q: %w", f, err)
		}
		for _, p := range cfg.Providers {
			if names.Has(p.Name) {
				return nil, "", fmt.Errorf("duplicate provider name %q found in configuration file(s)", p.Name)
			}
			names.Insert(p.Name)
			merged.Providers = append(merged.Providers, p)
		}
	}
	if errs := validateConfig(merged); len(errs) > 0 {
		return nil, "", fmt.Errorf("failed to validate credential provider config: %v", errs.ToAggregate())
	}
	return merged, fmt.Sprintf("sha256:%x", hasher.Sum(nil)), nil
}

// decodeConfig is the kubelet's decode: strict, Kind and Group checked.
func decodeConfig(data []byte) (*kubeletv1.CredentialProviderConfig, error) {
	obj, gvk, err := codecs().UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	if gvk.Kind != "CredentialProviderConfig" {
		return nil, fmt.Errorf("failed to decode %q (wrong Kind)", gvk.Kind)
	}
	if gvk.Group != kubeletv1.GroupName {
		return nil, fmt.Errorf("failed to decode CredentialProviderConfig, unexpected Group: %s", gvk.Group)
	}
	if c, ok := obj.(*kubeletv1.CredentialProviderConfig); ok {
		return c, nil
	}
	// v1alpha1 and v1beta1 have v1's fields (v1alpha1 fewer).
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	out := &kubeletv1.CredentialProviderConfig{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("unable to convert %T to *CredentialProviderConfig: %w", obj, err)
	}
	return out, nil
}

// validateConfig is the kubelet's validateCredentialProviderConfig with
// KubeletServiceAccountTokenForCredentialProviders on (its default since
// 1.34; nodelet refuses the gate set otherwise).
func validateConfig(config *kubeletv1.CredentialProviderConfig) field.ErrorList {
	var errs field.ErrorList
	if len(config.Providers) == 0 {
		errs = append(errs, field.Required(field.NewPath("providers"), "at least 1 item in plugins is required"))
	}
	fp := field.NewPath("providers")
	seen := sets.New[string]()
	for _, p := range config.Providers {
		if strings.Contains(p.Name, "/") {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot contain '/'"))
		}
		if strings.Contains(p.Name, " ") {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot contain spaces"))
		}
		if p.Name == "." {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot be '.'"))
		}
		if p.Name == ".." {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot be '..'"))
		}
		if seen.Has(p.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), p.Name))
		}
		seen.Insert(p.Name)
		if p.APIVersion == "" {
			errs = append(errs, field.Required(fp.Child("apiVersion"), ""))
		} else if _, ok := apiVersions[p.APIVersion]; !ok {
			errs = append(errs, field.NotSupported(fp.Child("apiVersion"), p.APIVersion, sets.List(sets.KeySet(apiVersions))))
		}
		if len(p.MatchImages) == 0 {
			errs = append(errs, field.Required(fp.Child("matchImages"), "at least 1 item in matchImages is required"))
		}
		for _, m := range p.MatchImages {
			if _, err := ParseSchemelessURL(m); err != nil {
				errs = append(errs, field.Invalid(fp.Child("matchImages"), m, fmt.Sprintf("match image is invalid: %s", err.Error())))
			}
		}
		if p.DefaultCacheDuration == nil {
			errs = append(errs, field.Required(fp.Child("defaultCacheDuration"), ""))
		}
		if p.DefaultCacheDuration != nil && p.DefaultCacheDuration.Duration < 0 {
			errs = append(errs, field.Invalid(fp.Child("defaultCacheDuration"), p.DefaultCacheDuration, "must be greater than or equal to 0"))
		}
		if p.TokenAttributes != nil {
			errs = append(errs, validateTokenAttributes(fp.Child("tokenAttributes"), p)...)
		}
	}
	return errs
}

// validCacheTypes are the kubelet's service-account token cache types.
var validCacheTypes = sets.New(string(kubeletv1.ServiceAccountServiceAccountTokenCacheType), string(kubeletv1.TokenServiceAccountTokenCacheType))

// validateTokenAttributes is the tokenAttributes part of the kubelet's
// validateCredentialProviderConfig.
func validateTokenAttributes(fldPath *field.Path, p kubeletv1.CredentialProvider) field.ErrorList {
	var errs field.ErrorList
	ta := p.TokenAttributes
	if ta.ServiceAccountTokenAudience == "" {
		errs = append(errs, field.Required(fldPath.Child("serviceAccountTokenAudience"), ""))
	}
	if ta.RequireServiceAccount == nil {
		errs = append(errs, field.Required(fldPath.Child("requireServiceAccount"), ""))
	}
	if p.APIVersion != credentialproviderv1.SchemeGroupVersion.String() {
		errs = append(errs, field.Forbidden(fldPath, fmt.Sprintf("tokenAttributes is only supported for %s API version", credentialproviderv1.SchemeGroupVersion.String())))
	}
	if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
		errs = append(errs, field.Forbidden(fldPath.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
	}
	errs = append(errs, validateAnnotationKeys(fldPath.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredServiceAccountAnnotationKeys)...)
	errs = append(errs, validateAnnotationKeys(fldPath.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalServiceAccountAnnotationKeys)...)
	if dup := sets.New(ta.RequiredServiceAccountAnnotationKeys...).Intersection(sets.New(ta.OptionalServiceAccountAnnotationKeys...)); dup.Len() > 0 {
		errs = append(errs, field.Invalid(fldPath, sets.List(dup), "annotation keys cannot be both required and optional"))
	}
	switch {
	case ta.CacheType == "":
		errs = append(errs, field.Required(fldPath.Child("cacheType"), fmt.Sprintf("cacheType is required to be set when tokenAttributes is specified. Supported values are: %s", strings.Join(sets.List(validCacheTypes), ", "))))
	case !validCacheTypes.Has(string(ta.CacheType)):
		errs = append(errs, field.NotSupported(fldPath.Child("cacheType"), ta.CacheType, sets.List(validCacheTypes)))
	}
	return errs
}

// validateAnnotationKeys is the kubelet's validateServiceAccountAnnotationKeys:
// qualified names (case aside), no duplicates.
func validateAnnotationKeys(fldPath *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for _, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(fldPath, k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(fldPath, k))
		}
		seen.Insert(k)
	}
	return errs
}
