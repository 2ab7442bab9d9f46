package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100
// on every Linux architecture's user ABI.
const userHZ = 100

// ProcCPU is a process's CPU time so far: its own (utime+stime) and that of
// its children it has reaped (cutime+cstime: runc under a shim, CNI plugins
// under containerd).
type ProcCPU struct {
	Self     time.Duration
	Children time.Duration
}

// Total is Self + Children.
func (c ProcCPU) Total() time.Duration { return c.Self + c.Children }

// ParseStat reads the CPU times of a /proc/<pid>/stat line. The command
// name (field 2) may hold spaces and parentheses; the fields after the last
// ")" are fixed.
func ParseStat(b []byte) (ProcCPU, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcCPU{}, fmt.Errorf("stat: no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	const utime = 14 - 3
	if len(f) <= utime+3 {
		return ProcCPU{}, fmt.Errorf("stat: %d fields after the command name, want at least %d", len(f), utime+4)
	}
	var v [4]int64
	for k := range v {
		n, err := strconv.ParseInt(f[utime+k], 10, 64)
		if err != nil {
			return ProcCPU{}, fmt.Errorf("stat: field %d: %w", utime+k+3, err)
		}
		v[k] = n
	}
	tick := time.Second / userHZ
	return ProcCPU{Self: time.Duration(v[0]+v[1]) * tick, Children: time.Duration(v[2]+v[3]) * tick}, nil
}

// ReadCPU reads /proc/<pid>/stat.
func ReadCPU(pid int) (ProcCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcCPU{}, err
	}
	return ParseStat(b)
}

// Memory is a process's resident memory now (VmRSS) and at its peak
// (VmHWM), in bytes.
type Memory struct {
	RSS uint64
	HWM uint64
}

// ParseStatus reads VmRSS and VmHWM of a /proc/<pid>/status file.
func ParseStatus(b []byte) (Memory, error) {
	var m Memory
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "VmRSS" && key != "VmHWM" {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("status: %s: unexpected %q", key, val)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("status: %s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS = n * 1024
		} else {
			m.HWM = n * 1024
		}
		seen++
	}
	if seen != 2 {
		return Memory{}, fmt.Errorf("status: VmRSS or VmHWM missing (a kernel thread or a zombie?)")
	}
	return m, nil
}

// ReadMemory reads /proc/<pid>/status.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	return ParseStatus(b)
}

// CPUOf sums the CPU times of pids; a process that is gone counts 0 and is
// reported in the error.
func CPUOf(pids []int) (ProcCPU, error) {
	var sum ProcCPU
	var gone []string
	for _, pid := range pids {
		c, err := ReadCPU(pid)
		if err != nil {
			gone = append(gone, strconv.Itoa(pid))
			continue
		}
		sum.Self += c.Self
		sum.Children += c.Children
	}
	if len(gone) > 0 {
		return sum, fmt.Errorf("processes gone: %s", strings.Join(gone, ","))
	}
	return sum, nil
}

// ReadPSS is a process's proportional set size (Pss of
// /proc/<pid>/smaps_rollup) in bytes: its resident memory with every page
// it shares divided among the processes sharing it; and of that its
// anonymous memory (Pss_Anon: heap, stacks, the runtime's own), the rest
// being its share of the files it maps (the executable).
func ReadPSS(pid int) (pss, anon uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	return ParseSmapsRollup(b)
}

// ParseSmapsRollup reads the Pss and Pss_Anon lines of a smaps_rollup
// file (Pss_Anon is 0 on kernels before 5.9, which lack it).
func ParseSmapsRollup(b []byte) (pss, anon uint64, err error) {
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || key != "Pss" && key != "Pss_Anon" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("smaps_rollup: %s without a value", key)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("smaps_rollup: %s %q: %w", key, f[0], err)
		}
		if key == "Pss" {
			pss, found = n*1024, true
		} else {
			anon = n * 1024
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("smaps_rollup: no Pss line")
	}
	return pss, anon, nil
}

// ProcMemory is one process's memory at a moment: RSS, PSS (and its
// anonymous part) and its peak RSS so far (VmHWM).
type ProcMemory struct {
	RSS     uint64 `json:"rssBytes"`
	PSS     uint64 `json:"pssBytes"`
	PSSAnon uint64 `json:"pssAnonBytes"`
	HWM     uint64 `json:"hwmBytes"`
}

// MemoryByProcess reads each named process's memory; processes that are
// gone are left out.
func MemoryByProcess(pids map[string]int) map[string]ProcMemory {
	out := map[string]ProcMemory{}
	for name, pid := range pids {
		m, err := ReadMemory(pid)
		if err != nil {
			continue
		}
		pss, anon, _ := ReadPSS(pid)
		out[name] = ProcMemory{RSS: m.RSS, PSS: pss, PSSAnon: anon, HWM: m.HWM}
	}
	return out
}

// MemoryOf sums the memory of pids (processes that are gone count 0).
func MemoryOf(pids []int) Memory {
	var sum Memory
	for _, pid := range pids {
		if m, err := ReadMemory(pid); err == nil {
			sum.RSS += m.RSS
			sum.HWM += m.HWM
		}
	}
	return sum
}

// rssSampler samples the summed RSS of a set of processes until stopped
// and keeps the peak: the processes' own peaks (VmHWM) need not fall at the
// same moment, so their sum overstates the peak of the total.
type rssSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak uint64
}

func sampleRSS(ctx context.Context, pids []int, every time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m := MemoryOf(pids)
			s.mu.Lock()
			s.peak = max(s.peak, m.RSS)
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak summed RSS seen.
func (s *rssSampler) Stop() uint64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// LoadAvg is the 1-, 5- and 15-minute load averages of /proc/loadavg as
// written there.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
