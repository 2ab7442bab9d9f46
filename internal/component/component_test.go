package component

import (
	"slices"
	"strings"
	"testing"
)

func TestDeclaredIsConsistent(t *testing.T) {
	if err := Declared.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestStartOrderRespectsRequires(t *testing.T) {
	order := StartOrder()
	if len(order) != 9 || order[0].Name != Bus {
		t.Fatalf("order = %v", Set(order).Names())
	}
	pos := map[string]int{}
	for i, c := range order {
		pos[c.Name] = i
	}
	for _, c := range Declared.Processes() {
		for _, r := range c.Requires {
			if pos[r] >= pos[c.Name] {
				t.Errorf("%s starts before its requirement %s", c.Name, r)
			}
		}
	}
	for _, c := range Declared {
		if _, ok := pos[c.Name]; ok != c.Process {
			t.Errorf("%s: in the start order = %v, Process = %v", c.Name, ok, c.Process)
		}
	}
}

func TestOrderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cs   Set
		err  string
	}{
		{"unknown", Set{{Name: "a", Process: true, Requires: []string{"x"}}}, "unknown component x"},
		{"cycle", Set{{Name: "a", Process: true, Requires: []string{"b"}}, {Name: "b", Process: true, Requires: []string{"a"}}}, "cycle"},
	} {
		if _, err := tc.cs.Order(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	two := Declared.Clone()
	for i := range two {
		if two[i].Name == Prober {
			two[i].Writes = append(two[i].Writes, Bucket{BucketStatus, 1})
		}
	}
	if err := two.Check(); err == nil || !strings.Contains(err.Error(), "nodelet_v1_pods_status has two writers") {
		t.Errorf("two writers: err = %v", err)
	}
	unwritten := Declared.Clone()
	for i := range unwritten {
		if unwritten[i].Name == GC {
			unwritten[i].Reads = append(unwritten[i].Reads, "nodelet_v1_nothing")
		}
	}
	if err := unwritten.Check(); err == nil || !strings.Contains(err.Error(), "which no component writes") {
		t.Errorf("read of an unwritten bucket: err = %v", err)
	}
}

// Every process that talks to CRI and runs as its own user holds the CRI
// group, every one that talks to the API the API group; nobody else.
func TestGroups(t *testing.T) {
	for _, c := range Declared.Processes() {
		g := c.Groups()
		if want := c.NeedsCRI && c.User() != ""; slices.Contains(g, CRIGroup) != want {
			t.Errorf("%s: groups %v (NeedsCRI %v, user %q)", c.Name, g, c.NeedsCRI, c.User())
		}
		if slices.Contains(g, APIGroup) != c.NeedsAPI {
			t.Errorf("%s: groups %v (NeedsAPI %v)", c.Name, g, c.NeedsAPI)
		}
	}
}
