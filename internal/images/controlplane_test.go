package images

import (
	"slices"
	"testing"
)

func TestParseLdd(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []string
	}{
		{"glibc", "\tlinux-vdso.so.1 (0x00007fc2b73c1000)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fc2b71ce000)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007fc2b73c3000)\n",
			[]string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}},
		{"static", "\tnot a dynamic executable\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseLdd(tc.out); !slices.Equal(got, tc.want) {
				t.Errorf("parseLdd: %q, want %q", got, tc.want)
			}
		})
	}
}
