package podutil

import "testing"

func TestExpand(t *testing.T) {
	vars := map[string]string{
		"VAR_A":     "A",
		"VAR_B":     "B",
		"VAR_C":     "C",
		"VAR_REF":   "$(VAR_A)",
		"VAR_EMPTY": "",
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"$(VAR_A)", "A"},
		{"___$(VAR_B)___", "___B___"},
		{"$(VAR_A)-$(VAR_B)-$(VAR_C)", "A-B-C"},
		{"$(VAR_REF)", "$(VAR_A)"}, // no recursion
		{"$(VAR_EMPTY)", ""},
		{"$(UNKNOWN)", "$(UNKNOWN)"},
		{"$$(VAR_A)", "$(VAR_A)"},
		{"$$$(VAR_A)", "$A"},
		{"$$$$(VAR_A)", "$$(VAR_A)"},
		{"$(VAR_A", "$(VAR_A"},
		{"x$(", "x$("},
		{"$()", "$()"},
		{"$", "$"},
		{"$VAR_A", "$VAR_A"},
		{"a$b", "a$b"},
		{"$(VAR_A)$", "A$"},
		{"f000-$$VAR_A", "f000-$VAR_A"},
	} {
		if got := Expand(tc.in, MappingFor(vars)); got != tc.want {
			t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
