package runtime

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	corev1 "k8s.io/api/core/v1"
)

// fileKeyValue resolves an env valueFrom.fileKeyRef as the kubelet's
// makeEnvironmentVariables (EnvFiles, beta and on in 1.37): the file at
// ref.path inside the pod's volume ref.volumeName (an emptyDir, which an
// init container usually fills), resolved without leaving the volume
// (securejoin), read with the kubelet's ParseEnv for ref.key. ok is false
// for an optional key that is missing (the variable is left out); a value
// that is empty counts as missing, as in the kubelet.
func fileKeyValue(ref *corev1.FileKeySelector, vols map[string]string) (value string, ok bool, err error) {
	optional := ref.Optional != nil && *ref.Optional
	host, found := vols[ref.VolumeName]
	if !found {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	path, err := securejoin.SecureJoin(host, ref.Path)
	if err != nil {
		return "", false, err
	}
	v, err := parseEnvFile(path, ref.Key)
	if err != nil {
		// The kubelet logs the details and tells the pod no more.
		return "", false, fmt.Errorf("couldn't parse env file")
	}
	if v == "" {
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, path)
	}
	return v, true, nil
}

// parseEnvFile is the kubelet's envutil.ParseEnv (pkg/kubelet/util/env):
// a strict subset of POSIX shell assignments, KEY='value' with values in
// single quotes (kept literally, over several lines if need be), blank
// lines and # comments skipped, no whitespace before '='; KEY= 'v' (a
// space after '=') assigns the empty string. It returns the value of the
// first assignment of key, "" when there is none.
func parseEnvFile(path, key string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("failed to open environment variable file %q: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lineNum := 0
	for sc.Scan() {
		lineNum++
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		eq := strings.Index(line, "=")
		if eq == -1 {
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", lineNum)
		}
		namePart := line[:eq]
		name := strings.TrimRight(namePart, " \t")
		if name == "" {
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", lineNum)
		}
		if namePart != name {
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", lineNum)
		}
		valuePart := line[eq+1:]
		trimmed := strings.TrimLeft(valuePart, " \t")
		if valuePart != trimmed {
			// KEY= 'v' assigns the empty string, as bash does.
			if name == key {
				return "", nil
			}
			continue
		}
		if !strings.HasPrefix(trimmed, "'") {
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", lineNum)
		}
		var b strings.Builder
		rest := trimmed[1:]
		start := lineNum
		for {
			if i := strings.Index(rest, "'"); i != -1 {
				b.WriteString(rest[:i])
				after := strings.TrimLeft(rest[i+1:], " \t")
				if after != "" && !strings.HasPrefix(after, "#") {
					return "", fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", lineNum)
				}
				if name == key {
					return b.String(), nil
				}
				break
			}
			b.WriteString(rest)
			b.WriteString("\n")
			if !sc.Scan() {
				return "", fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
			}
			lineNum++
			rest = sc.Text()
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("error reading environment variable file %q: %w", path, err)
	}
	return "", nil
}
