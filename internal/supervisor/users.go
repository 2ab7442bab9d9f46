package supervisor

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/daemon"
)

// identity is the OS user a child runs as; nil: the supervisor's own.
type identity struct {
	user     string
	uid, gid uint32
}

// identities resolves, with supervisor.componentUsers, the user of every
// component that runs as its own under the systemd units (component.Component.User):
// the same users, from deploy/systemd/sysusers.d/nodelet.conf, with group
// nodelet as the primary group and no other. A missing user or group, or
// a supervisor that is not root, is an error naming what to do.
func identities(order []component.Component, on bool) (map[string]*identity, error) {
	ids := map[string]*identity{}
	if !on {
		return ids, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("supervisor.componentUsers: `nodelet up` must run as root to start daemons as their own users (uid %d)", os.Geteuid())
	}
	g, err := user.LookupGroup(component.Group)
	if err != nil {
		return nil, fmt.Errorf("supervisor.componentUsers: group %s: %w (scripts/setup.sh makes it: systemd-sysusers deploy/systemd/sysusers.d/nodelet.conf)", component.Group, err)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	for _, c := range order {
		name := c.User()
		if name == "" {
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
		ids[c.Name] = &identity{user: name, uid: uint32(uid), gid: uint32(gid)}
	}
	return ids, nil
}

// credential is what the child is started with: the user, group nodelet,
// no supplementary groups (root's are dropped).
func (id *identity) credential() *syscall.Credential {
	if id == nil {
		return nil
	}
	return &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
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
