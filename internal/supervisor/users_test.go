package supervisor_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
)

// ensureUsers makes the daemons' users as scripts/setup.sh does, from the
// generated sysusers.d file.
func ensureUsers(t *testing.T) {
	t.Helper()
	conf, err := filepath.Abs("../../deploy/systemd/sysusers.d/nodelet.conf")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-sysusers", conf).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers %s (Debian's systemd package; scripts/setup.sh installs it): %v\n%s", conf, err, out)
	}
}

// procIDs reads a process's effective uid, gid and supplementary groups.
func procIDs(t *testing.T, pid int) (uid, gid string, groups []string) {
	t.Helper()
	for _, l := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		k, v, _ := strings.Cut(l, ":")
		f := strings.Fields(v)
		switch k {
		case "Uid":
			uid = f[1]
		case "Gid":
			gid = f[1]
		case "Groups":
			groups = f
		}
	}
	return uid, gid, groups
}

// readableAs lists the paths uid:gid (no other group, no capability) can
// read, trying each with setpriv (util-linux).
func readableAs(t *testing.T, uid, gid string, groups []string, paths []string) []string {
	t.Helper()
	var ok []string
	for _, p := range paths {
		args := []string{"--reuid", uid, "--regid", gid, "--clear-groups"}
		if len(groups) > 0 {
			args = []string{"--reuid", uid, "--regid", gid, "--groups", strings.Join(groups, ",")}
		}
		args = append(args, "--inh-caps", "-all", "--bounding-set", "-all", "--", "head", "-c", "2", p)
		out, err := exec.Command("setpriv", args...).CombinedOutput()
		switch {
		case err == nil && strings.HasPrefix(string(out), "SU"):
			ok = append(ok, p)
		case err != nil && !strings.Contains(string(out), "Permission denied"):
			t.Fatalf("setpriv head %s as %s: %v: %s", p, uid, err, out)
		}
	}
	return ok
}

// TestComponentUsers: with supervisor.componentUsers, `nodelet up` as root
// runs bus, sources, admission, prober, status and server as their own
// users (group nodelet, and the CRI and API groups of their units, no
// capability) and the runtime and gc as root, the node comes up, and each
// daemon of its own user can read its own seed and no other.
func TestComponentUsers(t *testing.T) {
	ensureUsers(t)
	// Their users must reach the binaries and the test's config.
	if err := os.Chmod(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The CRI socket as the managed containerd's [grpc] gid leaves it.
	cri, err := user.LookupGroup(component.CRIGroup)
	if err != nil {
		t.Fatal(err)
	}
	criGID, _ := strconv.Atoi(cri.Gid)
	if err := os.Chown(ctrd.Address, -1, criGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ctrd.Address, 0o660); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(ctrd.Address); d != "/"; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := startNodeWith(t, "  componentUsers: true\n")
	st := n.waitAll("all ready as their own users", nil)
	grp, err := user.LookupGroup(component.Group)
	if err != nil {
		t.Fatal(err)
	}

	// Every seed on the node: the bus's directory and every child's copy.
	var seeds []string
	ents, err := os.ReadDir(bus.CredentialsDir(n.stateDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		seeds = append(seeds, filepath.Join(bus.CredentialsDir(n.stateDir), e.Name()))
	}
	copies := map[string]string{}
	for _, c := range component.StartOrder() {
		env := readFile(t, fmt.Sprintf("/proc/%d/environ", st[c.Name].PID))
		for _, kv := range strings.Split(env, "\x00") {
			if v, ok := strings.CutPrefix(kv, "CREDENTIALS_DIRECTORY="); ok {
				copies[c.Name] = filepath.Join(v, bus.SystemdCredential)
				seeds = append(seeds, copies[c.Name])
			}
		}
	}
	if len(copies) != len(component.Declared.Processes())-1 {
		t.Fatalf("seed copies %v", copies)
	}

	ownUsers := []string{bus.BusAdmin, bus.Sources, bus.Admission, bus.Prober, bus.Status, bus.KubeletServer}
	for _, c := range component.StartOrder() {
		uid, gid, groups := procIDs(t, st[c.Name].PID)
		if !slices.Contains(ownUsers, c.Name) {
			if uid != "0" {
				t.Errorf("%s runs as uid %s, want root", c.Name, uid)
			}
			continue
		}
		u, err := user.Lookup(c.User())
		if err != nil {
			t.Fatal(err)
		}
		var wantGroups []string
		for _, g := range c.Groups() {
			gr, err := user.LookupGroup(g)
			if err != nil {
				t.Fatal(err)
			}
			wantGroups = append(wantGroups, gr.Gid)
		}
		slices.Sort(wantGroups)
		slices.Sort(groups)
		if uid != u.Uid || gid != grp.Gid || !slices.Equal(groups, wantGroups) {
			t.Errorf("%s runs as uid %s gid %s groups %v, want %s (%s) gid %s (nodelet), groups %v %v", c.Name, uid, gid, groups, u.Uid, c.User(), grp.Gid, c.Groups(), wantGroups)
		}
		var want []string
		if c.Name == bus.BusAdmin {
			want = seeds[:len(ents)]
		} else {
			want = []string{copies[c.Name]}
		}
		if got := readableAs(t, uid, gid, groups, seeds); !slices.Equal(got, want) {
			t.Errorf("%s (uid %s) can read %v, want %v", c.Name, uid, got, want)
		}
	}
}
