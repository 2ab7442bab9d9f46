package supervisor

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/daemon"
)

// identity is the OS user a child runs as; nil: the supervisor's own.
type identity struct {
	user     string
	uid, gid uint32
	// groups are its supplementary groups (component.Groups): the CRI
	// socket's and the certificates'.
	groups []uint32
}

// lookupGID resolves a group the sysusers.d file declares.
func lookupGID(name string) (uint32, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("supervisor.componentUsers: group %s: %w (scripts/setup.sh makes it: systemd-sysusers deploy/systemd/sysusers.d/nodelet.conf)", name, err)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	return uint32(gid), err
}

// identities resolves, with supervisor.componentUsers, the user of every
// component that runs as its own under the systemd units (component.Component.User):
// the same users, from deploy/systemd/sysusers.d/nodelet.conf, with group
// nodelet as the primary group and the supplementary groups their units
// give them. Unlike the units, `nodelet up` gives them no capability: it
// has no mount namespace to hide the other seeds from a daemon that could
// pass file modes. So a daemon whose unit needs CAP_DAC_OVERRIDE (gc:
// it rotates and removes root's container logs) stays root here. A missing
// user or group, or a supervisor that is not root, is an error naming what
// to do.
func identities(order []component.Component, on bool) (map[string]*identity, error) {
	ids := map[string]*identity{}
	if !on {
		return ids, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("supervisor.componentUsers: `nodelet up` must run as root to start daemons as their own users (uid %d)", os.Geteuid())
	}
	gid, err := lookupGID(component.Group)
	if err != nil {
		return nil, err
	}
	for _, c := range order {
		name := c.User()
		if name == "" || slices.Contains(c.Systemd.Caps, "CAP_DAC_OVERRIDE") {
			continue
		}
		u, err := user.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("supervisor.componentUsers: user %s: %w (scripts/setup.sh makes it: systemd-sysusers deploy/systemd/sysusers.d/nodelet.conf)", name, err)
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, err
		}
		if uid == 0 {
			return nil, fmt.Errorf("supervisor.componentUsers: user %s is root", name)
		}
		id := &identity{user: name, uid: uint32(uid), gid: gid, groups: []uint32{}}
		for _, g := range c.Groups() {
			n, err := lookupGID(g)
			if err != nil {
				return nil, err
			}
			id.groups = append(id.groups, n)
		}
		ids[c.Name] = id
	}
	return ids, nil
}

// credential is what the child is started with: the user, group nodelet,
// its supplementary groups only (root's are dropped).
func (id *identity) credential() *syscall.Credential {
	if id == nil {
		return nil
	}
	return &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: id.groups}
}

// prepareDirs gives a component of its own user its parts of the state
// dir, as the units' StateDirectory= does: each made if missing, with its
// mode, and owned by the user — the whole tree when the top is not, as a
// state dir first run by root. The state dir and its run directory stay
// root's (0755).
func prepareDirs(stateDir string, c component.Component, id *identity) error {
	if id == nil {
		return nil
	}
	// Its user passes through the state dir and its run directory.
	for _, d := range []string{stateDir, daemon.RunDir(stateDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if m := st.Mode().Perm(); m&0o011 != 0o011 {
			if err := os.Chmod(d, m|0o011); err != nil {
				return err
			}
		}
	}
	if c.Systemd.WritesShared {
		// The node's certificates, as the units' ExecStartPre= makes them:
		// root's, group nodelet-api, setgid, 2770.
		if err := sharedDir(filepath.Join(stateDir, component.SharedDir)); err != nil {
			return err
		}
	}
	mode := fs.FileMode(daemon.ComponentDirMode)
	if len(c.OwnDirs) > 0 {
		// The bus's store and seeds, and with them its run directory.
		mode = 0o700
	}
	for _, d := range append(append([]string{}, c.OwnDirs...), c.RunDir()) {
		p := filepath.Join(stateDir, d)
		if err := os.MkdirAll(p, mode); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid == id.uid && sys.Gid == id.gid {
			continue
		}
		err = filepath.WalkDir(p, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(id.uid), int(id.gid))
		})
		if err != nil {
			return fmt.Errorf("%s for %s: %w", p, id.user, err)
		}
	}
	return nil
}

// handOver makes a file the supervisor made for a child (its seed, its
// notify socket) the child's own.
func handOver(path string, id *identity) error {
	if id == nil {
		return nil
	}
	return os.Lchown(path, int(id.uid), int(id.gid))
}

// sharedDir makes dir root's, group component.APIGroup, setgid, 2770, and
// gives that group read access to what is already there (a pki root alone
// wrote before).
func sharedDir(dir string) error {
	gid, err := lookupGID(component.APIGroup)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(dir, 0, int(gid)); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o770|fs.ModeSetgid); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		st, err := os.Lstat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Gid != gid {
			if err := os.Lchown(p, -1, int(gid)); err != nil {
				return err
			}
		}
		if st.Mode().Perm()&0o040 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o040); err != nil {
				return err
			}
		}
	}
	return nil
}
