package bench

import (
	"slices"
	"testing"
)

func TestCoverage(t *testing.T) {
	for _, tc := range []struct {
		name             string
		kubelet, nodelet []string
		present          int
		missing          []string
		figure           string
	}{
		{name: "all present", kubelet: []string{"a", "b"}, nodelet: []string{"a", "b", "nodelet_x"}, present: 2, figure: "2/2 (100%)"},
		{name: "one missing", kubelet: []string{"a", "b", "c", "d"}, nodelet: []string{"b", "c", "d"}, present: 3, missing: []string{"a"}, figure: "3/4 (75%)"},
		{name: "no kubelet", nodelet: []string{"a"}, figure: "no kubelet families"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := coverage(tc.kubelet, tc.nodelet)
			if c.Present != tc.present || !slices.Equal(c.Missing, tc.missing) || c.String() != tc.figure {
				t.Errorf("coverage = %+v %q, want %d present, missing %v, %q", c, c, tc.present, tc.missing, tc.figure)
			}
		})
	}
}
