package main

import (
	"strings"
	"testing"
)

// The command line of scripts/cluster.sh: defaults, and a bad value named.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    flags
		wantErr string
	}{
		{args: []string{"-k8s-bin", "/k", "-nodelet-bin", "/n"}, want: flags{nodes: 2, agent: "nodelet", containerd: 2, k8sBin: "/k", nodeletBin: "/n", work: defaultWork}},
		{args: []string{"-k8s-bin", "/k", "-nodelet-bin", "/n", "-containerd", "1", "-agent", "kubelet", "-nodes", "3"},
			want: flags{nodes: 3, agent: "kubelet", containerd: 1, k8sBin: "/k", nodeletBin: "/n", work: defaultWork}},
		{args: []string{"-k8s-bin", "/k", "-containerd", "3"}, wantErr: "-containerd 3: want 1 or 2"},
		{args: []string{"-k8s-bin", "/k", "-agent", "crio"}, wantErr: `-agent "crio": want nodelet or kubelet`},
		{args: []string{"-k8s-bin", "/k", "-nodes", "0"}, wantErr: "-nodes 0: want 1 or more"},
		{args: []string{}, wantErr: "-k8s-bin is required"},
	} {
		got, err := parse(tc.args)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case got != tc.want:
			t.Errorf("%v: %+v, want %+v", tc.args, got, tc.want)
		}
	}
}
