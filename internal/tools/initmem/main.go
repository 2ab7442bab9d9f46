// Command initmem measures what nodeletd's linked packages cost every
// process before it does anything: it links what cmd/nodeletd links, and
// once the initialisers have run it collects twice, returns freed memory
// to the system and prints the live heap (runtime/metrics) and the
// process's anonymous memory (/proc/self/smaps_rollup). nodeletd is one
// executable run as ten processes, so each of them pays this
// (docs/performance.md, "Memory at rest"). Run it with
// GODEBUG=inittrace=1 to see each package's initialiser allocations on
// stderr; -sum adds them up from stdin; -memprofile writes what stays
// live:
//
//	GODEBUG=inittrace=1 go run ./internal/tools/initmem 2>&1 | go run ./internal/tools/initmem -sum
//	GODEBUG=memprofilerate=1 go run ./internal/tools/initmem -memprofile heap.pb.gz
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"

	// What cmd/nodeletd imports (TestInitmemLinksWhatNodeletdLinks).
	_ "github.com/nodelet/nodelet/bus"
	_ "github.com/nodelet/nodelet/internal/busd"
	_ "github.com/nodelet/nodelet/internal/daemon"
	_ "github.com/nodelet/nodelet/internal/supervisor"
	_ "github.com/nodelet/nodelet/services/admission"
	_ "github.com/nodelet/nodelet/services/devices"
	_ "github.com/nodelet/nodelet/services/gc"
	_ "github.com/nodelet/nodelet/services/prober"
	_ "github.com/nodelet/nodelet/services/runtime"
	_ "github.com/nodelet/nodelet/services/server"
	_ "github.com/nodelet/nodelet/services/sources"
	_ "github.com/nodelet/nodelet/services/status"
	_ "github.com/prometheus/client_golang/prometheus"
)

func main() {
	sum := flag.Bool("sum", false, "sum GODEBUG=inittrace=1 lines read from stdin and list the largest")
	top := flag.Int("top", 25, "with -sum, how many packages to list")
	profile := flag.String("memprofile", "", "write the heap profile after the collections here (run with GODEBUG=memprofilerate=1 to see every allocation of the initialisers)")
	flag.Parse()
	if *sum {
		sumTrace(*top)
		return
	}
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err == nil {
			err = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	fmt.Printf("live heap %.2f MiB, runtime total %.2f MiB, anonymous %.2f MiB\n",
		mib(s[0].Value.Uint64()), mib(s[1].Value.Uint64()), anonymousKiB()/1024)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// anonymousKiB reads Anonymous from /proc/self/smaps_rollup.
func anonymousKiB() float64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return -1
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Anonymous:" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// sumTrace adds up "init PKG @… ms, … ms clock, N bytes, M allocs" lines.
func sumTrace(top int) {
	type pkg struct {
		name  string
		bytes int
	}
	var all []pkg
	total, allocs := 0, 0
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 11 || f[0] != "init" || f[8] != "bytes," {
			if !strings.HasPrefix(sc.Text(), "init ") {
				fmt.Println(sc.Text())
			}
			continue
		}
		b, _ := strconv.Atoi(f[7])
		a, _ := strconv.Atoi(f[9])
		total += b
		allocs += a
		all = append(all, pkg{f[1], b})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].bytes > all[j].bytes })
	fmt.Printf("initialisers: %d packages, %d bytes (%.2f MB), %d allocs\n", len(all), total, float64(total)/1e6, allocs)
	for i := 0; i < top && i < len(all); i++ {
		fmt.Printf("  %8d  %s\n", all[i].bytes, all[i].name)
	}
}
