package podutil

import "testing"

func TestRawContainerID(t *testing.T) {
	for in, want := range map[string]string{"containerd://abc": "abc", "abc": "abc", "": "", "cri-o://x://y": "x://y"} {
		if got := RawContainerID(in); got != want {
			t.Errorf("RawContainerID(%q) = %q, want %q", in, got, want)
		}
	}
}
