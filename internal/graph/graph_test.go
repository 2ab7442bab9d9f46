package graph

import (
	"strings"
	"testing"
)

func TestStartOrderRespectsRequires(t *testing.T) {
	order := StartOrder()
	if len(order) != 8 || order[0].Name != "bus" {
		t.Fatalf("order = %v", names(order))
	}
	pos := map[string]int{}
	for i, c := range order {
		pos[c.Name] = i
	}
	for _, c := range Components {
		for _, r := range c.Requires {
			if pos[r] >= pos[c.Name] {
				t.Errorf("%s starts before its requirement %s", c.Name, r)
			}
		}
	}
}

func TestOrderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cs   []Component
		err  string
	}{
		{"unknown", []Component{{Name: "a", Requires: []string{"x"}}}, "unknown component x"},
		{"cycle", []Component{{Name: "a", Requires: []string{"b"}}, {Name: "b", Requires: []string{"a"}}}, "cycle"},
	} {
		if _, err := Order(tc.cs); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func names(cs []Component) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}
