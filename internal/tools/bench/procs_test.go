package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime ...
	tail := " S 1 2 3 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 12 0 100 200000 300"
	tests := []struct {
		name    string
		line    string
		want    ProcCPU
		wantErr string
	}{
		{"plain", "42 (nodelet-bus)" + tail, ProcCPU{Self: 3 * time.Second, Children: 100 * time.Millisecond}, ""},
		{"name with spaces and parentheses", "42 (a) b (c))" + tail, ProcCPU{Self: 3 * time.Second, Children: 100 * time.Millisecond}, ""},
		{"no name", "42 nodelet S 1", ProcCPU{}, "no command name"},
		{"too short", "42 (x) S 1 2 3", ProcCPU{}, "fields after the command name"},
		{"not a number", "42 (x) S 1 2 3 0 -1 4194560 100 0 0 0 x 50 7 3 20", ProcCPU{}, "field 14"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.line))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v", got, err, tc.want)
			}
			if got.Total() != tc.want.Self+tc.want.Children {
				t.Fatalf("Total = %v", got.Total())
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	full := "Name:\tnodelet-status\nVmPeak:\t 900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"
	m, err := ParseStatus([]byte(full))
	if err != nil || m.RSS != 40960*1024 || m.HWM != 51200*1024 {
		t.Fatalf("ParseStatus = %+v, %v", m, err)
	}
	for name, bad := range map[string]string{
		"kernel thread":  "Name:\tkworker/0:1\nThreads:\t1\n",
		"odd unit":       "VmHWM:\t1 MB\nVmRSS:\t1 kB\n",
		"not a number":   "VmHWM:\tx kB\nVmRSS:\t1 kB\n",
		"only one value": "VmRSS:\t1 kB\n",
	} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The readers work on a real process: this one.
func TestReadSelf(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	c, err := ReadCPU(os.Getpid())
	if err != nil || c.Self <= 0 {
		t.Fatalf("ReadCPU(self) = %+v, %v; want some CPU time after a busy loop", c, err)
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil || m.RSS == 0 || m.HWM < m.RSS {
		t.Fatalf("ReadMemory(self) = %+v, %v", m, err)
	}
	if _, err := CPUOf([]int{os.Getpid(), 1 << 30}); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("CPUOf with a missing pid: err = %v", err)
	}
	if s := sampleRSS(t.Context(), []int{os.Getpid()}, time.Millisecond); s.Stop() == 0 {
		t.Fatal("sampler saw no RSS")
	}
	if l := LoadAvg(); len(strings.Fields(l)) != 3 {
		t.Fatalf("LoadAvg = %q", l)
	}
}

func TestParseSmapsRollup(t *testing.T) {
	b := []byte("55d4c0a00000-7ffc8b5fe000 ---p 00000000 00:00 0                          [rollup]\nRss:               28812 kB\nPss:               27001 kB\nPss_Anon:          20000 kB\n")
	got, anon, err := ParseSmapsRollup(b)
	if err != nil || got != 27001*1024 || anon != 20000*1024 {
		t.Fatalf("ParseSmapsRollup = %d, %d, %v; want %d, %d", got, anon, err, 27001*1024, 20000*1024)
	}
	for _, bad := range []string{"Rss: 1 kB\n", "Pss: x kB\n", "Pss: 1 kB\nPss_Anon: y kB\n"} {
		if _, _, err := ParseSmapsRollup([]byte(bad)); err == nil {
			t.Errorf("ParseSmapsRollup(%q): no error", bad)
		}
	}
	// This process has one.
	if pss, anon, err := ReadPSS(os.Getpid()); err != nil || pss == 0 || anon == 0 || anon > pss {
		t.Fatalf("ReadPSS(self) = %d, %d, %v", pss, anon, err)
	}
}
