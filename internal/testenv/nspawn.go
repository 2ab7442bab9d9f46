package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/containerd/scratch"
)

// Debian 12 under a real systemd as PID 1, for tests of the generated
// units: systemd-nspawn --boot of a root made with debootstrap, both from
// Debian's packages (systemd-container, debootstrap; scripts/setup.sh
// installs them).

// nspawnPackages go into the root beyond debootstrap's minbase (which
// brings util-linux: nsenter and setpriv).
const nspawnPackages = "systemd,systemd-sysv,dbus"

// nspawnRecipe names the root's contents; a cached root made by another
// recipe is built again.
const nspawnRecipe = "debian12-minbase+" + nspawnPackages

// NspawnRootDir is where the root is cached: ${NODELET_CACHE:-$HOME/.cache/nodelet}/nspawn-debian12.
func NspawnRootDir() string {
	base := os.Getenv("NODELET_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "nodelet")
	}
	return filepath.Join(base, "nspawn-debian12")
}

// RequiresNspawn returns the cached Debian 12 root, making it on first use
// (debootstrap, about a minute), and skips the test, saying why, only when
// systemd-nspawn or debootstrap is missing and apt-get cannot install them.
func RequiresNspawn(t testing.TB) string {
	t.Helper()
	RequiresRoot(t)
	var missing []string
	for bin, pkg := range map[string]string{"systemd-nspawn": "systemd-container", "debootstrap": "debootstrap"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		t.Logf("installing %v (scripts/setup.sh installs them)", missing)
		if out, err := aptInstall(missing...); err != nil {
			t.Skipf("systemd-nspawn and debootstrap are needed to boot a real systemd (Debian packages systemd-container, debootstrap; scripts/setup.sh installs them) and apt-get could not install %v: %v\n%s", missing, err, out)
		}
	}
	began := time.Now()
	root, err := NspawnRoot()
	if err != nil {
		t.Fatalf("nspawn root: %v", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Logf("made the Debian 12 root %s with debootstrap in %s (cached for the next runs)", root, d.Round(time.Second))
	}
	return root
}

func aptInstall(pkgs ...string) (string, error) {
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err == nil {
		return "", nil
	}
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return string(out), err
	}
	out, err := install()
	return string(out), err
}

// NspawnRoot returns the cached root, building it once per machine under
// a lock (concurrent test binaries wait for the first).
func NspawnRoot() (string, error) {
	dir := NspawnRootDir()
	marker := filepath.Join(dir, ".nodelet-recipe")
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == nspawnRecipe {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == nspawnRecipe {
		return dir, nil
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	mirror := DebianMirror()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+nspawnPackages,
		"bookworm", tmp, mirror).CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("debootstrap bookworm from %s: %v\n%s", mirror, err, tail(string(out), 20))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".nodelet-recipe"), []byte(nspawnRecipe+"\n"), 0o644); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// DebianMirror is the archive this machine's apt uses for bookworm (from
// /etc/apt/sources.list and sources.list.d, one-line or deb822), so
// debootstrap fetches from where apt-get does; deb.debian.org if none.
func DebianMirror() string {
	files := []string{"/etc/apt/sources.list"}
	for _, pat := range []string{"/etc/apt/sources.list.d/*.sources", "/etc/apt/sources.list.d/*.list"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	return debianMirror(files)
}

func debianMirror(files []string) string {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uris, suites []string
		flush := func() string {
			for _, s := range suites {
				if s == "bookworm" && len(uris) > 0 {
					return uris[0]
				}
			}
			uris, suites = nil, nil
			return ""
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "#") {
				continue
			}
			if line == "" {
				if u := flush(); u != "" {
					return u
				}
				continue
			}
			fields := strings.Fields(line)
			switch {
			case fields[0] == "deb" && len(fields) >= 3:
				i := 1
				if strings.HasPrefix(fields[1], "[") {
					for i < len(fields) && !strings.HasSuffix(fields[i], "]") {
						i++
					}
					i++
				}
				if i+1 < len(fields) && fields[i+1] == "bookworm" {
					return fields[i]
				}
			case strings.EqualFold(fields[0], "URIs:"):
				uris = fields[1:]
			case strings.EqualFold(fields[0], "Suites:"):
				suites = fields[1:]
			}
		}
		if u := flush(); u != "" {
			return u
		}
	}
	return "http://deb.debian.org/debian"
}

// Machine is a booted systemd-nspawn container: its own systemd as PID 1,
// the host's network, a throw-away overlay over the cached root.
type Machine struct {
	Name string
	// Leader is the host pid of the container's PID 1 (systemd).
	Leader int
	cmd    *exec.Cmd
	out    *Buffer
	exited chan error
}

// BootMachine boots root with systemd-nspawn --boot (no machined is
// needed: the host's PID 1 need not be systemd), binds the given host
// paths at the same paths inside (read-write, or read-only for bindRO),
// and waits until its systemd has finished starting up. The machine is
// powered off (then killed) at cleanup.
func BootMachine(t testing.TB, root string, bind, bindRO []string) *Machine {
	t.Helper()
	return BootMachineArgs(t, root, bind, bindRO)
}

// BootMachineArgs is BootMachine with more systemd-nspawn options, e.g.
// --capability=CAP_NET_ADMIN for a machine that runs containers itself.
func BootMachineArgs(t testing.TB, root string, bind, bindRO []string, extra ...string) *Machine {
	t.Helper()
	name := fmt.Sprintf("nodelet-test-%d", os.Getpid())
	args := []string{"--quiet", "--register=no", "--volatile=overlay", "-D", root, "--boot", "--machine=" + name}
	args = append(args, extra...)
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		// The host's PID 1 is not systemd: no one to ask for a scope, so
		// the container stays in this process's cgroup. Under a systemd
		// host nspawn makes a scope of its own, with its cgroup delegated.
		args = append(args, "--keep-unit")
	}
	for _, b := range bind {
		args = append(args, "--bind="+b)
	}
	for _, b := range bindRO {
		args = append(args, "--bind-ro="+b)
	}
	m := &Machine{Name: name, out: &Buffer{}, exited: make(chan error, 1)}
	m.cmd = exec.Command("systemd-nspawn", args...)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	// The console is not a terminal: nspawn then passes stdin through.
	m.cmd.Stdin = nil
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(m.stop)
	deadline := time.Now().Add(90 * time.Second)
	for m.Leader == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("systemd-nspawn did not start the container's PID 1:\n%s", tail(m.out.String(), 40))
		}
		select {
		case err := <-m.exited:
			t.Fatalf("systemd-nspawn exited: %v\n%s", err, tail(m.out.String(), 40))
		case <-time.After(50 * time.Millisecond):
		}
		for _, pid := range scratch.Descendants(m.cmd.Process.Pid) {
			if nsPIDIsOne(pid) {
				m.Leader = pid
			}
		}
	}
	for {
		out, _ := m.Run("systemctl", "is-system-running")
		if s := strings.TrimSpace(out); s == "running" || s == "degraded" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's systemd did not finish starting (is-system-running: %q):\n%s", out, tail(m.out.String(), 40))
		}
		select {
		case err := <-m.exited:
			t.Fatalf("systemd-nspawn exited: %v\n%s", err, tail(m.out.String(), 40))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// nsPIDIsOne: pid is PID 1 of its own pid namespace.
func nsPIDIsOne(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "NSpid:"); ok {
			fs := strings.Fields(f)
			return len(fs) > 1 && fs[len(fs)-1] == "1"
		}
	}
	return false
}

// Run runs a command inside the machine (every namespace of its PID 1) and
// returns its combined output.
func (m *Machine) Run(args ...string) (string, error) {
	return m.RunFor(60*time.Second, args...)
}

// RunFor is Run with a timeout other than a minute (kubeadm join waits
// up to minutes for the kubelet).
func (m *Machine) RunFor(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"-a", "-t", strconv.Itoa(m.Leader), "--"}, args...)...).CombinedOutput()
	return string(out), err
}

// MustRun is Run that fails the test on error.
func (m *Machine) MustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, err := m.Run(args...)
	if err != nil {
		t.Fatalf("in the machine, %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// WriteFile writes a file inside the machine's root (its overlay).
func (m *Machine) WriteFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(fmt.Sprintf("/proc/%d/root", m.Leader), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

// Output is what systemd-nspawn and the machine's console printed.
func (m *Machine) Output() string { return m.out.String() }

func (m *Machine) stop() {
	if m.Leader != 0 {
		_, _ = m.Run("systemctl", "poweroff", "--no-block")
	}
	select {
	case <-m.exited:
		return
	case <-time.After(30 * time.Second):
	}
	_ = m.cmd.Process.Kill()
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
	}
}
