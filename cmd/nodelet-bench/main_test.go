package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		args        []string
		ns, bounds  []int
		rounds      int
		idle        time.Duration
		errContains string
	}{
		{args: nil, ns: []int{1, 20, 50}, bounds: []int{1, 2, 4, 0}, rounds: 3, idle: 20 * time.Second},
		{args: []string{"-n", "1,5", "-rounds", "2", "-bounds", "0, 2", "-idle", "0"}, ns: []int{1, 5}, bounds: []int{0, 2}, rounds: 2},
		{args: []string{"-n", "1,x"}, errContains: `-n: "x" is not a number`},
		{args: []string{"-bounds", ""}, errContains: "-bounds"},
		{args: []string{"extra"}, errContains: "unexpected arguments"},
		{args: []string{"-containerd", "3"}, errContains: "-containerd: 3 is neither 1 nor 2"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parse(tc.args)
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) {
					t.Fatalf("err = %v, want %q", err, tc.errContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.Ns, tc.ns) || !slices.Equal(o.Bounds, tc.bounds) || o.Rounds != tc.rounds || o.Idle != tc.idle {
				t.Fatalf("options %+v", o)
			}
			if o.ContainerdMajor != 2 {
				t.Fatalf("containerd %d, want 2 (containerd 2.x, the default)", o.ContainerdMajor)
			}
		})
	}
}
