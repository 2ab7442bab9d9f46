// Package scratch starts private containerds: each on its own root, state,
// socket, CNI bridge and subnet, with the node's local images imported, and
// removes everything it made when stopped or, after a crash, when its slot is
// taken next. Tests use it through internal/testenv; the bench uses it
// directly (so that nodelet-bench links no test helpers).
package scratch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cni"
	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/images"
)

// Paths shared by every test containerd on the machine.
const (
	// DefaultSlotDir holds the slot locks and each slot's ephemeral state.
	DefaultSlotDir = "/run/nodelet-test"
	// DefaultRootDir holds each slot's containerd root (content, snapshots).
	DefaultRootDir = "/var/lib/nodelet-test"
	// maxSlot is the number of test containerds that may run at once; slot N
	// uses bridge nlt<N> and subnet 10.200.<N>.0/24.
	maxSlot = 250
	// runcRoot is where containerd-shim-runc-v2 keeps runc's state for the
	// k8s.io namespace (fixed in the shim, shared by every containerd).
	runcRoot = "/run/containerd/runc/k8s.io"
)

// Options tune Start. The zero value is what tests want.
type Options struct {
	// SlotDir holds the slot locks and the instances' state and sockets
	// (kept short: a unix socket path has at most 107 bytes). Default: DefaultSlotDir.
	SlotDir string
	// RootDir holds the instances' containerd roots. Default: DefaultRootDir.
	RootDir string
	// ImageCacheDir is where the local images are built. Default:
	// images.DefaultCacheDir().
	ImageCacheDir string
	// NoImages skips building and importing the pause and busybox images.
	// Default: false (both are imported).
	NoImages bool
	// RegistryConfigPath is containerd's registry hosts directory
	// (<host>/hosts.toml), e.g. to send registry.k8s.io to a registry on
	// loopback. Default: "" (none: pulls go where the image names say).
	RegistryConfigPath string
	// Slot asks for exactly this slot (1..250) and fails when it is taken.
	// Default: 0, the first free slot.
	Slot int
	// Namespaces are the namespaces containerd runs in (a test cluster's
	// node: its own network and UTS namespaces). Default: the caller's.
	Namespaces containerd.Namespaces
	// NoCNIConfig leaves CNIConfDir empty: the node agent writes the
	// conflist (nodelet's runtime.manageCNIConfig) once it knows its pod
	// CIDR, and the network is not ready until then. Default: false (a
	// conflist for Subnet, ready at once).
	NoCNIConfig bool
	// Major is containerd's major version: 0 or 1 for Debian's 1.6
	// (/usr/bin/containerd), 2 for a containerd 2.x build (config version
	// 3). Default: 0 (1.6). internal/testenv sets it from
	// NODELET_TEST_CONTAINERD.
	Major int
	// CDISpecDirs are where containerd 2.x reads CDI specs. Default:
	// containerd's (/etc/cdi, /var/run/cdi).
	CDISpecDirs []string
	// Binary is the containerd to run; for Major 2 the runc shim beside it
	// is the one its runc runtime uses. Default: /usr/bin/containerd for
	// 1.6, containerd.Cached2() (scripts/containerd2.sh's build) for 2.
	Binary string
	// SystemdCgroup makes runc use the systemd cgroup driver (containerd's
	// SystemdCgroup; needs systemd as PID 1, e.g. inside a systemd-nspawn
	// machine). Default: false (cgroupfs).
	SystemdCgroup bool
	// StatsCollectPeriod is containerd's CRI stats_collect_period in
	// seconds (see containerd.Config). Default: 0 (containerd's, 10).
	StatsCollectPeriod int
}

// Containerd is a private containerd for one test binary (or one test): its
// own root, state, socket, CNI config, bridge and subnet.
type Containerd struct {
	Endpoint    string // CRI endpoint, unix://<Address>
	Address     string // containerd's socket path (for ctr --address and CRI)
	Dir         string // the instance's ephemeral dir: state, socket, CNI conf, IPAM leases, log
	Root        string // containerd's root dir
	CNIConfDir  string // where the instance's conflist is
	CNIBinDir   string // the CNI plugins (Debian's)
	BridgeName  string // nlt<Slot>
	Subnet      string // 10.200.<Slot>.0/24
	NetworkName string // the conflist's name, nlt<Slot>
	Slot        int    // 1..250, held with flock for the instance's life
	LogFile     string // containerd's log

	// Images are the imported local images (pause first, then busybox).
	Images []images.Tarball
	// StartTime is how long Start took, images included.
	StartTime time.Duration

	proc     *containerd.Process
	lock     *os.File
	stopOnce sync.Once
}

// Start starts a private containerd with the node's local images
// imported and a CNI bridge network of its own, ready for RunPodSandbox. Call
// it from TestMain (and Stop after m.Run), or use NewContainerd in a test.
//
// Each instance takes a free slot N (flock on <SlotDir>/slot-N.lock), so that
// test binaries running in parallel never share a bridge, subnet, socket or
// directory. What a crashed earlier holder of the slot left behind (shims,
// containers, mounts, bridge, dirs) is removed first.
func Start(opts Options) (_ *Containerd, err error) {
	began := time.Now()
	if os.Geteuid() != 0 {
		return nil, errors.New("scratch: Start needs root (containerd, runc, CNI and mounts)")
	}
	if opts.SlotDir == "" {
		opts.SlotDir = DefaultSlotDir
	}
	if opts.RootDir == "" {
		opts.RootDir = DefaultRootDir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The images (usually already in the cache) are made while containerd starts.
	type built struct {
		tars []images.Tarball
		err  error
	}
	imagesDone := make(chan built, 1)
	if opts.NoImages {
		imagesDone <- built{}
	} else {
		go func() {
			tars, err := images.EnsureImages(ctx, opts.ImageCacheDir)
			imagesDone <- built{tars, err}
		}()
	}

	slot, lock, err := acquireSlot(opts.SlotDir, opts.Slot)
	if err != nil {
		return nil, err
	}
	c := slotInstance(opts, slot)
	c.lock = lock
	defer func() {
		if err != nil {
			cancel() // an image build still running gives up
			c.Stop()
		}
	}()
	// A crashed earlier holder of this slot may have left things behind, and
	// so may those of other slots no one holds now.
	c.cleanup()
	sweepAbandonedSlots(opts, slot)

	if !opts.NoCNIConfig {
		conf, err := cni.Render(cni.Options{
			NetworkName: c.NetworkName,
			BridgeName:  c.BridgeName,
			Subnet:      c.Subnet,
			IPAMDataDir: filepath.Join(c.Dir, "ipam"),
		})
		if err != nil {
			return nil, err
		}
		if err := cni.Validate(ctx, conf, []string{c.CNIBinDir}); err != nil {
			return nil, fmt.Errorf("scratch: CNI plugins: %w", err)
		}
		if err := cni.WriteAtomic(c.CNIConfDir, cni.DefaultFileName, conf); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(c.CNIConfDir, 0o755); err != nil {
		return nil, err
	}

	binary := opts.Binary
	if binary == "" && opts.Major >= 2 {
		binary = containerd.Cached2().Containerd
	}
	c.proc, err = containerd.Start(ctx, containerd.Config{
		Root:           c.Root,
		State:          filepath.Join(c.Dir, "state"),
		Socket:         c.Address,
		CNIBinDir:      c.CNIBinDir,
		CNIConfDir:     c.CNIConfDir,
		SandboxImage:   images.PauseImage,
		ConfigFile:     filepath.Join(c.Dir, "config.toml"),
		KillWithParent: true,
		Namespaces:     opts.Namespaces,
		Major:          opts.Major,
		Binary:         binary,
		CDISpecDirs:    opts.CDISpecDirs,
		SystemdCgroup:  opts.SystemdCgroup,

		StatsCollectPeriod: opts.StatsCollectPeriod,

		RegistryConfigPath: opts.RegistryConfigPath,
	}, c.LogFile)
	if err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}

	b := <-imagesDone
	if b.err != nil {
		return nil, fmt.Errorf("scratch: images: %w", b.err)
	}
	c.Images = b.tars
	var wg sync.WaitGroup
	errs := make([]error, len(b.tars))
	for i, tar := range b.tars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = images.Import(ctx, c.Address, "k8s.io", tar.Path)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}

	c.StartTime = time.Since(began)
	if opts.NoCNIConfig {
		return c, nil
	}
	// The conflist was in place before containerd started, so the network
	// is ready at once; wait for it anyway rather than fail a first sandbox.
	conn, err := containerd.Dial(c.Address)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for {
		err := containerd.NetworkReady(ctx, conn)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("scratch: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.StartTime = time.Since(began)
	return c, nil
}

// Restart stops containerd, whose shims and containers keep running, and
// starts it again on the same root, state, socket and config: a runtime
// restarted under a node, as an operator or a package upgrade does it.
func (c *Containerd) Restart(ctx context.Context) error {
	if c.proc == nil {
		return errors.New("scratch: containerd was never started")
	}
	cfg := c.proc.Config()
	if err := c.proc.Stop(); err != nil {
		return fmt.Errorf("scratch: restart: %w", err)
	}
	p, err := containerd.Start(ctx, cfg, c.LogFile)
	if err != nil {
		return fmt.Errorf("scratch: restart: %w", err)
	}
	c.proc = p
	return nil
}

// Pid is the containerd process's id (0 before start), e.g. to kill it in a
// test of what survives a runtime crash.
func (c *Containerd) Pid() int {
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid()
}

// Stop removes every pod sandbox through CRI, stops containerd, kills what
// is left of the instance's shims and containers, unmounts everything under
// its dirs, deletes its bridge, removes its dirs and releases its slot. It is
// safe to call more than once.
func (c *Containerd) Stop() {
	c.stopOnce.Do(func() {
		if c.proc != nil {
			c.removeSandboxes()
			_ = c.proc.Stop()
		}
		c.cleanup()
		if c.lock != nil {
			c.lock.Close() // releases the flock
		}
	})
}

// Leftovers lists what a stopped instance left behind on this machine: its
// dirs, its bridge, shims of its socket, nat rules tagged with its network.
// It looks only while it holds the slot's lock (ok true): a slot another
// instance took since holds that one's things.
func (c *Containerd) Leftovers(slotDir string) (left []string, ok bool) {
	if slotDir == "" {
		slotDir = DefaultSlotDir
	}
	_, lock, err := acquireSlot(slotDir, c.Slot)
	if err != nil {
		return nil, false
	}
	defer lock.Close()
	for _, d := range []string{c.Dir, c.Root} {
		if _, err := os.Stat(d); err == nil {
			left = append(left, "dir "+d)
		}
	}
	if exec.Command("ip", "link", "show", c.BridgeName).Run() == nil {
		left = append(left, "bridge "+c.BridgeName)
	}
	for _, pid := range ShimPIDs(c.Address) {
		left = append(left, "shim pid "+strconv.Itoa(pid))
	}
	if out, err := exec.Command("iptables-save", "-t", "nat").Output(); err == nil {
		tag := fmt.Sprintf(`name: \"%s\" `, c.NetworkName)
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "-A ") && strings.Contains(line, tag) {
				left = append(left, "nat rule "+line)
			}
		}
	}
	return left, true
}

// slotInstance describes the instance of slot n (nothing started).
func slotInstance(opts Options, n int) *Containerd {
	c := &Containerd{
		Dir:         filepath.Join(opts.SlotDir, "slot-"+strconv.Itoa(n)),
		Root:        filepath.Join(opts.RootDir, "slot-"+strconv.Itoa(n)),
		CNIBinDir:   containerd.DefaultCNIBinDir,
		BridgeName:  fmt.Sprintf("nlt%d", n),
		NetworkName: fmt.Sprintf("nlt%d", n),
		Subnet:      fmt.Sprintf("10.200.%d.0/24", n),
		Slot:        n,
	}
	c.Address = filepath.Join(c.Dir, "containerd.sock")
	c.Endpoint = "unix://" + c.Address
	c.CNIConfDir = filepath.Join(c.Dir, "net.d")
	c.LogFile = filepath.Join(c.Dir, "containerd.log")
	return c
}

// Sweep cleans up after every slot of the default dirs that no one holds:
// what test containerds whose process was killed left (shims, containers,
// mounts, dirs).
func Sweep() { sweepAbandonedSlots(Options{SlotDir: DefaultSlotDir, RootDir: DefaultRootDir}, 0) }

// sweepAbandonedSlots cleans up after every slot other than own whose dir
// exists while no one holds its lock: its test binary died without Stop.
func sweepAbandonedSlots(opts Options, own int) {
	entries, _ := os.ReadDir(opts.SlotDir)
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "slot-"))
		if !e.IsDir() || err != nil || n == own || n < 1 || n > maxSlot {
			continue
		}
		_, lock, err := acquireSlot(opts.SlotDir, n)
		if err != nil {
			continue // in use
		}
		slotInstance(opts, n).cleanup()
		lock.Close()
	}
}

// removeSandboxes stops and removes every pod sandbox (and so every
// container), letting CNI release the IPs and iptables rules.
func (c *Containerd) removeSandboxes() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := containerd.Dial(c.Address)
	if err != nil {
		return
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for _, sb := range resp.Items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
			_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
		}()
	}
	wg.Wait()
}

// cleanup removes every trace of the slot's instance with containerd no
// longer running: containers, shims, mounts, bridge, dirs.
func (c *Containerd) cleanup() {
	taskDir := filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", "k8s.io")
	ids, _ := os.ReadDir(taskDir)
	// Containers whose shim is still alive (containerd was killed, or a
	// sandbox removal failed): runc kills them and removes their cgroups.
	for _, id := range ids {
		_ = exec.Command("runc", "--root", runcRoot, "delete", "--force", id.Name()).Run()
	}
	// Shims of this instance, and anything still under them.
	for _, pid := range ShimPIDs(c.Address) {
		for _, p := range append(Descendants(pid), pid) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	// Sockets of shims that could not remove them themselves.
	for _, id := range ids {
		if b, err := os.ReadFile(filepath.Join(taskDir, id.Name(), "address")); err == nil {
			if sock, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "unix://"); ok && strings.HasPrefix(sock, "/run/containerd/s/") {
				_ = os.Remove(sock)
			}
		}
		_ = os.RemoveAll(filepath.Join(runcRoot, id.Name()))
	}
	for _, dir := range []string{c.Dir, c.Root} {
		for _, m := range MountsUnder(dir) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if c.NetworkName != "" {
		// Left only when CNI DEL never ran (containerd died under its pods).
		removeIPTablesRules(c.NetworkName)
		removeCNICache(c.NetworkName, ids)
	}
	if c.BridgeName != "" {
		_ = exec.Command("ip", "link", "delete", c.BridgeName).Run()
	}
	_ = os.RemoveAll(c.Dir)
	_ = os.RemoveAll(c.Root)
}

// removeIPTablesRules deletes the nat rules that the bridge and portmap
// plugins tagged with network's name (comment `name: "<network>" id: ...`)
// and the per-container chains they jump to.
func removeIPTablesRules(network string) {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return
	}
	tag := fmt.Sprintf(`name: \"%s\" `, network)
	var script strings.Builder
	var chains []string
	for _, line := range strings.Split(string(out), "\n") {
		rule, ok := strings.CutPrefix(line, "-A ")
		if !ok || !strings.Contains(line, tag) {
			continue
		}
		script.WriteString("-D " + rule + "\n")
		if f := strings.Fields(rule); len(f) >= 2 && f[len(f)-2] == "-j" && strings.HasPrefix(f[len(f)-1], "CNI-") {
			if !slices.Contains(chains, f[len(f)-1]) {
				chains = append(chains, f[len(f)-1])
			}
		}
	}
	if script.Len() == 0 {
		return
	}
	for _, ch := range chains {
		script.WriteString("-F " + ch + "\n-X " + ch + "\n")
	}
	cmd := exec.Command("iptables-restore", "--noflush", "--wait")
	cmd.Stdin = strings.NewReader("*nat\n" + script.String() + "COMMIT\n")
	_ = cmd.Run()
}

// removeCNICache removes libcni's cached results of network's attachments
// and of the loopback attachments of the given containers.
func removeCNICache(network string, ids []os.DirEntry) {
	const dir = "/var/lib/cni/results"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		stale := strings.HasPrefix(n, network+"-")
		for _, id := range ids {
			stale = stale || n == "cni-loopback-"+id.Name()+"-lo"
		}
		if stale {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
}

// acquireSlot takes slot want, or the first free slot of 1..maxSlot when
// want is 0, with a non-blocking flock; the lock is held while the returned
// file stays open. Lock files are never removed (removing one would race
// with another locker).
func acquireSlot(dir string, want int) (int, *os.File, error) {
	if want < 0 || want > maxSlot {
		return 0, nil, fmt.Errorf("scratch: slot %d: want 1..%d", want, maxSlot)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, err
	}
	first, last := 1, maxSlot
	if want != 0 {
		first, last = want, want
	}
	for n := first; n <= last; n++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("slot-%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return 0, nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		return n, f, nil
	}
	if want != 0 {
		return 0, nil, fmt.Errorf("scratch: containerd slot %d in %s is taken", want, dir)
	}
	return 0, nil, fmt.Errorf("scratch: all %d containerd slots in %s are taken", maxSlot, dir)
}

// ShimPIDs lists the containerd-shim processes started by the containerd
// listening on address (they carry "-address <address>" on their command line).
func ShimPIDs(address string) []int {
	var pids []int
	for pid, args := range processes() {
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == address {
			pids = append(pids, pid)
		}
	}
	return pids
}

// MountsUnder lists the mount points at or below dir, deepest first (the
// order to unmount them in).
func MountsUnder(dir string) []string {
	ms, _ := hostinfo.MountsUnder(dir)
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Path)
	}
	return out
}

// processes maps every pid to its command line.
func processes() map[int][]string {
	out := map[int][]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		out[pid] = strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	}
	return out
}

// descendants lists every process below pid.
func Descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces; fields after ")" are fixed.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, ch := range children[p] {
			out = append(out, ch)
			queue = append(queue, ch)
		}
	}
	return out
}
