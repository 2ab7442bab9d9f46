package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Issue 32: env valueFrom.fileKeyRef, as the kubelet's
// makeEnvironmentVariables and envutil.ParseEnv.
func TestFileKeyRefEnv(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	if err := os.MkdirAll(filepath.Join(vol, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(vol, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sub/app.env", "# settings\n\n  COLOR='blue' # comment\nMULTI='line 1\nline 2'\nEMPTY= 'ignored'\nLITERAL='$(COLOR) $HOME'\n")
	write("bad.env", "COLOR=blue\n")
	// Outside the volume: a path may not reach it.
	if err := os.WriteFile(filepath.Join(dir, "secret.env"), []byte("COLOR='stolen'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vols := map[string]string{"config": vol}
	ref := func(path, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "config", Path: path, Key: key, Optional: ptr.To(optional)}}
	}
	env := func(vars ...corev1.EnvVar) (map[string]string, error) {
		pod := newPod("p", busybox("a", ""))
		pod.Spec.Containers[0].Env = vars
		_, got, err := containerEnv(context.Background(), pod, &pod.Spec.Containers[0], envInputs{Volumes: vols})
		return got, err
	}
	got, err := env(
		corev1.EnvVar{Name: "COLOR", ValueFrom: ref("sub/app.env", "COLOR", false)},
		corev1.EnvVar{Name: "MULTI", ValueFrom: ref("sub/app.env", "MULTI", false)},
		corev1.EnvVar{Name: "LITERAL", ValueFrom: ref("sub/app.env", "LITERAL", false)},
		corev1.EnvVar{Name: "MISSING", ValueFrom: ref("sub/app.env", "NOPE", true)},
		corev1.EnvVar{Name: "EMPTY", ValueFrom: ref("sub/app.env", "EMPTY", true)},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"COLOR": "blue", "MULTI": "line 1\nline 2", "LITERAL": "$(COLOR) $HOME"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"MISSING", "EMPTY"} {
		if _, ok := got[k]; ok {
			t.Errorf("optional missing key %s set to %q", k, got[k])
		}
	}
	for _, tc := range []struct {
		name, path, key, volume, wantErr string
	}{
		{"required key missing", "sub/app.env", "NOPE", "config", `environment variable key "NOPE" not found in file`},
		{"unquoted value", "bad.env", "COLOR", "config", "couldn't parse env file"},
		{"no such file", "none.env", "COLOR", "config", "couldn't parse env file"},
		{"no such volume", "sub/app.env", "COLOR", "other", `cannot find the volume "other" referenced by FileKeyRef`},
		// securejoin keeps ../ inside the volume: vol/secret.env, absent.
		{"path leaving the volume", "../secret.env", "COLOR", "config", "couldn't parse env file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := ref(tc.path, tc.key, false)
			src.FileKeyRef.VolumeName = tc.volume
			if _, err := env(corev1.EnvVar{Name: "X", ValueFrom: src}); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
