package hostinfo

import (
	"os"
	"testing"
)

func TestUnescapeMountPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\134backslash`, "/tab\tand\\backslash"},
		{`/not\9octal`, `/not\9octal`},
		{`/short\04`, `/short\04`},
	} {
		if got := unescapeMountPath(tc.in); got != tc.want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMountsUnderProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc/self/mountinfo")
	}
	ms, err := MountsUnder("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[len(ms)-1].Path != "/proc" || ms[len(ms)-1].FSType != "proc" {
		t.Fatalf("mounts under /proc, deepest first: %+v; want /proc (proc) last", ms)
	}
}
