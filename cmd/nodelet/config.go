package main

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/config"
)

func init() {
	commands = append(commands, command{"config", "check the node configuration, show it, or get one key: config [check|show|get KEY]", runConfig})
}

func runConfig(args []string) int {
	in := newInvocation("config")
	flags := in.Flags
	if code, ok := in.parse(args); !ok {
		return code
	}
	cfg, code, ok := in.load()
	if !ok {
		return code
	}
	verb := flags.Arg(0)
	switch verb {
	case "", "check":
		for _, d := range cfg.Deprecations() {
			fmt.Fprintln(os.Stderr, "warning:", d)
		}
		fmt.Println("configuration is valid")
		return 0
	case "show", "get":
		b, err := yaml.Marshal(toMap(cfg))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if verb == "show" {
			os.Stdout.Write(b)
			return 0
		}
		var m map[string]any
		_ = yaml.Unmarshal(b, &m)
		key := flags.Arg(1)
		var cur any = m
		for _, p := range strings.Split(key, ".") {
			mm, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = mm[p]
		}
		if cur == nil && !known(key) {
			fmt.Fprintf(os.Stderr, "nodelet config: %s: unknown key\n", key)
			return config.ExitCode
		}
		switch v := cur.(type) {
		case string:
			fmt.Println(v)
		case nil:
			fmt.Println()
		default:
			b, _ := yaml.Marshal(v)
			os.Stdout.Write(b)
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "nodelet config: unknown verb %q (check, show, get KEY)\n", verb)
	return config.ExitCode
}

func known(key string) bool {
	for _, k := range config.Keys() {
		if k == key {
			return true
		}
	}
	return false
}

// toMap renders the configuration with its YAML key names and durations
// as strings.
func toMap(cfg *config.Config) map[string]any {
	return config.ToMap(cfg)
}
