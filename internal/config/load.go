package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"sigs.k8s.io/yaml"
)

// EnvPrefix of every environment override: NODELET_<SECTION>_<KEY>.
const EnvPrefix = "NODELET"

// Error is a configuration problem; Key names the offending setting.
// Daemons print it and exit with ExitCode.
type Error struct {
	Key     string
	Problem string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return "config: " + e.Problem
	}
	return fmt.Sprintf("config: %s: %s", e.Key, e.Problem)
}

// ExitCode is the exit status of a process stopped by a bad configuration.
const ExitCode = 2

// Defaults returns the configuration with every default filled in.
func Defaults() *Config {
	host, _ := os.Hostname()
	return &Config{
		Node: NodeConfig{
			Name:          strings.ToLower(host),
			StateDir:      "/var/lib/nodelet",
			RootDir:       "/var/lib/kubelet",
			MaxPods:       110,
			PodCIDR:       "10.88.0.0/16",
			ClusterDomain: "cluster.local",
			ResolvConf:    "/etc/resolv.conf",
			PodLogsDir:    "/var/log/pods",
		},
		Bus: BusConfig{Listen: "127.0.0.1:4250", HeartbeatInterval: 5 * time.Second,
			MaxStore: "2Gi", BucketMaxBytes: "128Mi", MaxValueSize: "1536Ki", EventsMaxBytes: "128Mi", EventsMaxAge: 24 * time.Hour,
			DeletedKeyRetention: time.Hour},
		Runtime: RuntimeConfig{
			Endpoint:                  "unix:///run/containerd/containerd.sock",
			ContainerdConfig:          "/etc/nodelet/containerd/config.toml",
			ContainerdVersion:         2,
			SandboxImage:              "nodelet.local/pause:3.10",
			RelistPeriod:              time.Second,
			RuntimeRequestTimeout:     2 * time.Minute,
			MaxContainerRestartPeriod: 300 * time.Second,
			MaxParallelImagePulls:     5,
			CNIConfDir:                "/etc/nodelet/cni/net.d",
			CNIBinDirs:                []string{"/usr/lib/cni", "/opt/cni/bin"},
			ManageCNIConfig:           true,
			CNIBridgeName:             "nodelet0",
			CNINetworkName:            "nodelet",
			CgroupRoot:                "/nodelet",
			CgroupDriver:              "cgroupfs",
			PodPidsLimit:              -1,
			EnforceNodeAllocatable:    []string{"pods"},
			ConfigMapAndSecretChangeDetectionStrategy: "Watch",
			AllowHostPathForStaticPods:                true,
			SyncFrequency:                             time.Minute,
			ImagePullCredentialsVerificationPolicy:    "NeverVerifyPreloadedImages",
		},
		Sources: SourcesConfig{
			FileCheckFrequency: 20 * time.Second,
			HTTPCheckFrequency: 20 * time.Second,
			KubeAPIQPS:         50,
			KubeAPIBurst:       100,
		},
		Status: StatusConfig{
			NodeStatusUpdateFrequency: 10 * time.Second,
			NodeStatusReportFrequency: 5 * time.Minute,
			NodeLeaseDurationSeconds:  40,
			EventRecordQPS:            50,
			EventBurst:                100,
			HeartbeatStaleAfter:       30 * time.Second,
		},
		Server: ServerConfig{
			Address:                "0.0.0.0",
			Port:                   10250,
			HealthzBindAddress:     "127.0.0.1",
			HealthzPort:            10248,
			EnableSystemLogHandler: true,
			EnableProfilingHandler: true,
			Authentication: ServerAuthenticationConfig{
				Webhook: ServerWebhookAuthnConfig{Enabled: true, CacheTTL: 2 * time.Minute},
			},
			Authorization: ServerAuthorizationConfig{
				Mode:    "Webhook",
				Webhook: ServerWebhookAuthzConfig{CacheAuthorizedTTL: 5 * time.Minute, CacheUnauthorizedTTL: 30 * time.Second},
			},
		},
		GC: GCConfig{
			ContainerGCPeriod:           time.Minute,
			MaxPerPodContainer:          1,
			MaxContainers:               -1,
			ImageGCPeriod:               5 * time.Minute,
			ImageGCHighThresholdPercent: 85,
			ImageGCLowThresholdPercent:  80,
			ImageMinimumGCAge:           2 * time.Minute,
			ContainerLogMaxSize:         "10Mi",
			ContainerLogMaxFiles:        5,
			ContainerLogMonitorInterval: 10 * time.Second,
			EvictionHard: map[string]string{
				"memory.available":  "100Mi",
				"nodefs.available":  "10%",
				"imagefs.available": "15%",
				"nodefs.inodesFree": "5%",
			},
			EvictionPressureTransitionPeriod: 5 * time.Minute,
			EvictionMonitoringPeriod:         10 * time.Second,
		},
		Supervisor: SupervisorConfig{
			RestartBackoff:      time.Second,
			RestartBackoffMax:   30 * time.Second,
			RestartBackoffReset: 60 * time.Second,
			ReadyTimeout:        30 * time.Second,
		},
		Memory: MemoryConfig{GCPercent: 100},
	}
}

// leaf is one settable key.
type leaf struct {
	key  string // dotted, as written in YAML: sources.staticPodPath
	kind reflect.Kind
	typ  reflect.Type
}

// leaves lists every key of Config. Maps and slices are leaves: their
// contents are free-form.
func leaves() []leaf {
	var out []leaf
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue // what load derives, not a key
			}
			name := f.Tag.Get("mapstructure")
			key := prefix + name
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
				walk(f.Type, key+".")
				continue
			}
			out = append(out, leaf{key: key, kind: f.Type.Kind(), typ: f.Type})
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

// Keys lists every configuration key.
func Keys() []string {
	var keys []string
	for _, l := range leaves() {
		keys = append(keys, l.key)
	}
	return keys
}

// Loader reads the configuration of one process.
type Loader struct {
	v     *viper.Viper
	flags *pflag.FlagSet
	file  *string
}

// NewLoader registers --config and one --<section>.<key> flag per scalar key
// on flags.
func NewLoader(flags *pflag.FlagSet) *Loader {
	l := &Loader{v: viper.New(), flags: flags}
	l.file = flags.String("config", "", "node configuration file (YAML)")
	for _, lf := range leaves() {
		switch lf.kind {
		case reflect.Map, reflect.Slice:
			continue
		}
		flags.String(lf.key, "", "overrides "+lf.key+" of the config file")
	}
	return l
}

// Load reads the file named by --config (if any), applies the environment
// and flags, and validates the result. Every problem is an *Error.
func (l *Loader) Load() (*Config, error) {
	return load(l.v, *l.file, l.flags)
}

// LoadFile loads path with the environment applied and no flags.
func LoadFile(path string) (*Config, error) {
	return load(viper.New(), path, nil)
}

func load(v *viper.Viper, path string, flags *pflag.FlagSet) (*Config, error) {
	def := Defaults()
	defMap := map[string]any{}
	if err := mapstructure.Decode(def, &defMap); err != nil {
		return nil, err
	}
	for _, lf := range leaves() {
		v.SetDefault(lf.key, lookup(defMap, lf.key))
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	var doc map[string]any
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, &Error{Problem: fmt.Sprintf("cannot read %s: %v", path, err)}
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return nil, &Error{Problem: fmt.Sprintf("%s is not valid YAML: %v", path, err)}
		}
		if err := checkKnown(doc); err != nil {
			return nil, err
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(strings.NewReader(string(raw))); err != nil {
			return nil, &Error{Problem: fmt.Sprintf("%s: %v", path, err)}
		}
	}
	if flags != nil {
		var ferr error
		flags.Visit(func(f *pflag.Flag) {
			if f.Name == "config" || ferr != nil {
				return
			}
			if err := v.BindPFlag(f.Name, f); err != nil {
				ferr = &Error{Key: f.Name, Problem: err.Error()}
			}
		})
		if ferr != nil {
			return nil, ferr
		}
	}
	cfg := &Config{}
	// Decode key by key so that an error names its key.
	for _, lf := range leaves() {
		raw := v.Get(lf.key)
		if lf.kind == reflect.Map {
			// viper lowercases map keys; label keys and eviction signals
			// are case-sensitive, so maps come from the file as written.
			raw = lookupFold(doc, lf.key)
			if raw == nil {
				raw = lookup(defMap, lf.key)
			}
		}
		if err := decodeLeaf(cfg, lf, raw); err != nil {
			return nil, err
		}
	}
	_, inEnv := os.LookupEnv(EnvPrefix + "_NODE_PODCIDR")
	cfg.Node.podCIDRDefaulted = lookupFold(doc, "node.podCIDR") == nil && !inEnv &&
		(flags == nil || flags.Lookup("node.podCIDR") == nil || !flags.Lookup("node.podCIDR").Changed)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func lookup(m map[string]any, key string) any {
	parts := strings.Split(key, ".")
	var cur any = m
	for _, p := range parts {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

// lookupFold finds a dotted key in a YAML document, matching case-insensitively.
func lookupFold(doc map[string]any, key string) any {
	var cur any = doc
	for _, p := range strings.Split(key, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		var next any
		for k, v := range mm {
			if strings.EqualFold(k, p) {
				next = v
			}
		}
		if next == nil {
			return nil
		}
		cur = next
	}
	return cur
}

// checkKnown refuses keys the configuration does not have, naming them.
func checkKnown(doc map[string]any) error {
	known := map[string]leaf{}
	prefixes := map[string]bool{} // sections and nested sections (server.authentication)
	for _, lf := range leaves() {
		key := strings.ToLower(lf.key)
		known[key] = lf
		parts := strings.Split(key, ".")
		for i := 1; i < len(parts); i++ {
			prefixes[strings.Join(parts[:i], ".")] = true
		}
	}
	var unknown []string
	var walk func(prefix string, m map[string]any) error
	walk = func(prefix string, m map[string]any) error {
		for k, body := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			lower := strings.ToLower(key)
			if _, ok := known[lower]; ok {
				continue
			}
			if !prefixes[lower] {
				unknown = append(unknown, key)
				continue
			}
			if body == nil {
				continue
			}
			mm, ok := body.(map[string]any)
			if !ok {
				return &Error{Key: key, Problem: "must be a mapping of settings"}
			}
			if err := walk(key, mm); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("", doc); err != nil {
		return err
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return &Error{Key: unknown[0], Problem: "unknown key" + plural(unknown)}
	}
	return nil
}

func plural(keys []string) string {
	if len(keys) == 1 {
		return ""
	}
	return fmt.Sprintf(" (also unknown: %s)", strings.Join(keys[1:], ", "))
}

// decodeLeaf decodes one raw value into its field of cfg.
func decodeLeaf(cfg *Config, lf leaf, raw any) error {
	field := fieldByKey(reflect.ValueOf(cfg).Elem(), lf.key)
	if raw == nil {
		return nil
	}
	if s, ok := raw.(string); ok && lf.kind == reflect.Slice && lf.typ.Elem().Kind() == reflect.String {
		// From the environment or a flag: comma-separated.
		var parts []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		raw = parts
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		WeaklyTypedInput: true,
		ErrorUnused:      true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			mapstructure.StringToSliceHookFunc(","),
		),
		Result: field.Addr().Interface(),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(raw); err != nil {
		return &Error{Key: lf.key, Problem: cleanDecodeError(err)}
	}
	return nil
}

// durationHook reads durations from strings ("20s") only; a bare number
// is refused because its unit would be a guess.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	switch d := data.(type) {
	case string:
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("invalid duration %q (use e.g. 10s, 5m, 1h30m)", d)
		}
		return dur, nil
	case time.Duration:
		return d, nil
	case int, int64, float64:
		if reflect.ValueOf(d).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("invalid duration %v: give a unit (e.g. %vs)", d, d)
	}
	return data, nil
}

func cleanDecodeError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "error(s):"); i >= 0 {
		s = strings.TrimSpace(s[i+len("error(s):"):])
	}
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*"))
		if l != "" {
			lines = append(lines, stripDecoding(l))
		}
	}
	return strings.Join(lines, "; ")
}

func stripDecoding(s string) string {
	s = strings.TrimPrefix(s, "'' ")
	for _, p := range []string{"error decoding '", "decoding '"} {
		if strings.HasPrefix(s, p) {
			if i := strings.Index(s, "': "); i >= 0 {
				return s[i+3:]
			}
		}
	}
	return s
}

func fieldByKey(v reflect.Value, key string) reflect.Value {
	for _, part := range strings.Split(key, ".") {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).Tag.Get("mapstructure") == part {
				v = v.Field(i)
				break
			}
		}
	}
	return v
}

// Value is the value of key in cfg (a leaf, as Keys lists them).
func Value(cfg *Config, key string) (any, bool) {
	if !slices.ContainsFunc(leaves(), func(l leaf) bool { return l.key == key }) {
		return nil, false
	}
	return fieldByKey(reflect.ValueOf(cfg).Elem(), key).Interface(), true
}

// EnvName is the environment variable that overrides key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// ToMap renders cfg as the YAML document that would produce it: keys as
// written in the file, durations as strings.
func ToMap(cfg *Config) map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(cfg).Elem()
	for _, lf := range leaves() {
		f := fieldByKey(v, lf.key)
		var val any = f.Interface()
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		parts := strings.Split(lf.key, ".")
		m := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = val
	}
	return out
}
