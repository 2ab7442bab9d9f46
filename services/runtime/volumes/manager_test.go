package volumes

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testenv"

	"github.com/nodelet/nodelet/internal/podutil"
)

func testPod(name string, vols ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Volumes: vols, Containers: []corev1.Container{{Name: "c"}}},
	}
}

func vol(name string, src corev1.VolumeSource) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: src}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestHostPathTypes(t *testing.T) {
	host := t.TempDir()
	file := filepath.Join(host, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hp := func(path string, typ corev1.HostPathType) corev1.Volume {
		return vol("v", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}})
	}
	for _, tc := range []struct {
		name    string
		vol     corev1.Volume
		static  bool
		refuse  bool
		errPart string
		created bool
	}{
		{name: "directory or create", vol: hp(filepath.Join(host, "new", "dir"), corev1.HostPathDirectoryOrCreate), created: true},
		{name: "file or create", vol: hp(filepath.Join(host, "made", "f"), corev1.HostPathFileOrCreate), created: true},
		{name: "directory exists", vol: hp(host, corev1.HostPathDirectory)},
		{name: "file exists", vol: hp(file, corev1.HostPathFile)},
		{name: "file is not a directory", vol: hp(file, corev1.HostPathDirectory), errPart: "is not a directory"},
		{name: "directory is not a file", vol: hp(host, corev1.HostPathFileOrCreate), errPart: "is not a file"},
		{name: "not a socket", vol: hp(file, corev1.HostPathSocket), errPart: "is not a socket file"},
		{name: "missing file", vol: hp(filepath.Join(host, "nope"), corev1.HostPathFile), errPart: "does not exist"},
		{name: "unset type takes anything", vol: hp(filepath.Join(host, "nope"), corev1.HostPathUnset)},
		{name: "static pod, allowed", vol: hp(host, corev1.HostPathDirectory), static: true},
		{name: "static pod, refused", vol: hp(host, corev1.HostPathDirectory), static: true, refuse: true,
			errPart: "runtime.allowHostPathForStaticPods is false"},
		{name: "API pod on a node refusing static hostPath", vol: hp(host, corev1.HostPathDirectory), refuse: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Options{StateDir: t.TempDir(), RefuseHostPathForStaticPods: tc.refuse, Log: quietLog()})
			pod := testPod("p", tc.vol)
			pod.Annotations = map[string]string{podutil.AnnotationConfigSource: "api"}
			if tc.static {
				pod.Annotations[podutil.AnnotationConfigSource] = "file"
			}
			paths, err := m.Setup(context.Background(), pod)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "v" : `) {
					t.Fatalf("err = %v, want %q", err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if paths["v"] != tc.vol.HostPath.Path {
				t.Fatalf("path %s", paths["v"])
			}
			if _, err := os.Stat(paths["v"]); tc.created && err != nil {
				t.Fatalf("not created: %v", err)
			}
		})
	}
}

// mapGetter serves config maps and secrets that the test changes.
type mapGetter struct {
	mu      sync.Mutex
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (g *mapGetter) GetConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if o, ok := g.cms[ns+"/"+name]; ok {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

func (g *mapGetter) GetSecret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if o, ok := g.secrets[ns+"/"+name]; ok {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fsTypeAt(t *testing.T, p string) string {
	t.Helper()
	ms, err := mountsUnder(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Path == p {
			return m.FSType
		}
	}
	return ""
}

// Without an API server: emptyDir (disk and memory), hostPath and
// downwardAPI work; configMap, secret and token volumes fail with a clear
// message naming the volume; Teardown leaves no directory and no mount.
func TestStandaloneVolumes(t *testing.T) {
	testenv.RequiresRoot(t)
	state := t.TempDir()
	m := New(Options{StateDir: state, Log: quietLog(),
		NodeAllocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}})
	size := resource.MustParse("16Mi")
	exp := int64(3600)
	good := testPod("good",
		vol("scratch", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
		vol("mem", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}),
		vol("host", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}}),
		vol("info", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		}}}),
	)
	ctx := context.Background()
	t.Cleanup(func() { _ = m.Teardown(ctx, string(good.UID)) })
	paths, err := m.Setup(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	uid := string(good.UID)
	if p := paths["scratch"]; p != VolumeDir(state, uid, pluginEmptyDir, "scratch") || fsTypeAt(t, p) != "" {
		t.Fatalf("scratch at %s (%s)", p, fsTypeAt(t, p))
	}
	if fi, _ := os.Stat(paths["scratch"]); fi.Mode().Perm() != 0o777 {
		t.Fatalf("emptyDir mode %v", fi.Mode())
	}
	if p := paths["mem"]; fsTypeAt(t, p) != "tmpfs" {
		t.Fatalf("memory emptyDir %s is %q", p, fsTypeAt(t, p))
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(paths["mem"], &fs); err != nil || int64(fs.Blocks)*fs.Bsize != size.Value() {
		t.Fatalf("tmpfs size %d (%v), want sizeLimit %d", int64(fs.Blocks)*fs.Bsize, err, size.Value())
	}
	info := paths["info"]
	if info != VolumeDir(state, uid, pluginDownwardAPI, "info") || fsTypeAt(t, info) != "tmpfs" {
		t.Fatalf("downwardAPI at %s (%s)", info, fsTypeAt(t, info))
	}
	if got := readFile(t, filepath.Join(info, "labels")); got != `app="good"` {
		t.Fatalf("labels %q", got)
	}
	// A label change reaches the file on the next sync.
	relabelled := good.DeepCopy()
	relabelled.Labels["tier"] = "web"
	if _, err := m.Setup(ctx, relabelled); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(info, "labels")); got != "app=\"good\"\ntier=\"web\"" {
		t.Fatalf("labels after the change %q", got)
	}
	// Setup is idempotent: no second tmpfs on top.
	if _, err := m.Setup(ctx, relabelled); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mountsUnder(paths["mem"]); len(ms) != 1 {
		t.Fatalf("%d mounts at %s", len(ms), paths["mem"])
	}

	bad := testPod("bad",
		vol("cfg", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}),
		vol("creds", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}),
		vol("token", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
		}}}),
		vol("nfs", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/"}}),
	)
	_, err = m.Setup(ctx, bad)
	for _, want := range []string{
		`MountVolume.SetUp failed for volume "cfg" : configmap "app-config": no API server to read it from`,
		`MountVolume.SetUp failed for volume "creds" : secret "db": no API server`,
		`MountVolume.SetUp failed for volume "token" : token of service account ns/default: no API server`,
		`MountVolume.SetUp failed for volume "nfs" : the nfs volume type is not supported`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %q", err, want)
		}
	}

	for _, p := range []*corev1.Pod{good, bad} {
		if err := m.Teardown(ctx, string(p.UID)); err != nil {
			t.Fatal(err)
		}
		dir := PodDir(state, string(p.UID))
		if ms, _ := mountsUnder(dir); len(ms) > 0 {
			t.Fatalf("mounts left: %v", ms)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", dir, err)
		}
	}
	if err := m.Teardown(ctx, "never-seen"); err != nil {
		t.Fatalf("teardown of an unknown pod: %v", err)
	}
}

// Teardown unmounts whatever is mounted under the pod's directory, a
// mount stacked on another and one inside another included, before it
// removes the directory; the file systems mounted there keep their files
// (RemoveAll never reaches into a mount).
func TestTeardownUnmountsStackedAndNestedMounts(t *testing.T) {
	testenv.RequiresRoot(t)
	state := t.TempDir()
	m := New(Options{StateDir: state, Log: quietLog()})
	uid := "stacked"
	dir := VolumeDir(state, uid, pluginEmptyDir, "v")
	inner := filepath.Join(dir, "inner")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The host file system bound under the pod: its file must survive.
	host := t.TempDir()
	keep := filepath.Join(host, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mnt := range []func() error{
		func() error { return unix.Mount("tmpfs", dir, "tmpfs", 0, "") },
		func() error { return unix.Mount("tmpfs", dir, "tmpfs", 0, "") }, // stacked
		func() error { return os.Mkdir(inner, 0o755) },
		func() error { return unix.Mount(host, inner, "", unix.MS_BIND, "") }, // nested
	} {
		if err := mnt(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range []string{inner, dir, dir} {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	})
	if ms, _ := mountsUnder(PodDir(state, uid)); len(ms) != 3 {
		t.Fatalf("set-up: %d mounts under the pod, want 3: %v", len(ms), ms)
	}
	if err := m.Teardown(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mountsUnder(PodDir(state, uid)); len(ms) > 0 {
		t.Fatalf("mounts left: %v", ms)
	}
	if _, err := os.Stat(PodDir(state, uid)); !os.IsNotExist(err) {
		t.Fatalf("pod dir left: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("the bound host directory lost its file: %v", err)
	}
}

// Unmount (a pod stopped for good) unmounts its volumes and removes their
// directories, an emptyDir's data with them, and leaves the rest of the
// pod's directory (its containers' termination-message files); Teardown
// then removes that too.
func TestUnmountKeepsPodDirectory(t *testing.T) {
	testenv.RequiresRoot(t)
	state := t.TempDir()
	m := New(Options{StateDir: state, Log: quietLog(),
		NodeAllocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}})
	pod := testPod("done",
		vol("scratch", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
		vol("mem", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}),
	)
	ctx := context.Background()
	uid := string(pod.UID)
	t.Cleanup(func() { _ = m.Teardown(ctx, uid) })
	paths, err := m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(paths["scratch"], "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := filepath.Join(PodDir(state, uid), "containers", "app", "termination-log")
	if err := os.MkdirAll(filepath.Dir(msg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(msg, []byte("bye"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mountsUnder(PodDir(state, uid)); len(ms) != 1 {
		t.Fatalf("set-up: %d mounts, want the memory emptyDir's", len(ms))
	}
	for range 2 { // idempotent
		if err := m.Unmount(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	if ms, _ := mountsUnder(PodDir(state, uid)); len(ms) > 0 {
		t.Fatalf("mounts left: %v", ms)
	}
	if _, err := os.Stat(filepath.Join(PodDir(state, uid), "volumes")); !os.IsNotExist(err) {
		t.Fatalf("volumes dir left: %v", err)
	}
	if b, err := os.ReadFile(msg); err != nil || string(b) != "bye" {
		t.Fatalf("termination message after Unmount: %q %v", b, err)
	}
	if err := m.Teardown(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PodDir(state, uid)); !os.IsNotExist(err) {
		t.Fatalf("pod dir left after Teardown: %v", err)
	}
}

// Secrets and configMaps from a getter (Get strategy): files with the
// items' paths and modes, secrets on tmpfs, and Run rewrites them every
// SyncFrequency after the objects change; a missing optional configMap
// makes an empty volume.
func TestRefreshRewritesChangedObjects(t *testing.T) {
	testenv.RequiresRoot(t)
	state := t.TempDir()
	g := &mapGetter{
		cms:     map[string]*corev1.ConfigMap{"ns/app": {Data: map[string]string{"app.conf": "v1"}}},
		secrets: map[string]*corev1.Secret{"ns/db": {Data: map[string][]byte{"password": []byte("s3cret")}}},
	}
	clk := clocktesting.NewFakeClock(time.Now())
	m := New(Options{StateDir: state, Objects: g, Strategy: StrategyGet, SyncFrequency: 10 * time.Second, Clock: clk, Log: quietLog()})
	yes := true
	pod := testPod("app",
		vol("cfg", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}),
		vol("opt", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}}),
		vol("creds", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db", DefaultMode: i32(0o400),
			Items: []corev1.KeyToPath{{Key: "password", Path: "db/password"}}}}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	t.Cleanup(func() { _ = m.Teardown(context.Background(), string(pod.UID)) })
	paths, err := m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	cfg, creds := paths["cfg"], paths["creds"]
	if cfg != VolumeDir(state, string(pod.UID), pluginConfigMap, "cfg") || creds != VolumeDir(state, string(pod.UID), pluginSecret, "creds") {
		t.Fatalf("paths %v", paths)
	}
	if fsTypeAt(t, creds) != "tmpfs" || fsTypeAt(t, cfg) != "" {
		t.Fatalf("secret on %q, configMap on %q", fsTypeAt(t, creds), fsTypeAt(t, cfg))
	}
	if got := readFile(t, filepath.Join(creds, "db/password")); got != "s3cret" {
		t.Fatalf("password %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(creds, "db/password")); fi.Mode().Perm() != 0o400 {
		t.Fatalf("password mode %v", fi.Mode())
	}
	for name := range listDir(t, paths["opt"]) {
		if !strings.HasPrefix(name, "..") {
			t.Fatalf("optional missing configMap has %s", name)
		}
	}

	g.mu.Lock()
	g.cms["ns/app"].Data["app.conf"] = "v2"
	g.secrets["ns/db"].Data["password"] = []byte("rotated")
	g.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for readFile(t, filepath.Join(cfg, "app.conf")) != "v2" || readFile(t, filepath.Join(creds, "db/password")) != "rotated" {
		if time.Now().After(deadline) {
			t.Fatal("the refresh loop did not rewrite the volumes")
		}
		clk.Step(10 * time.Second)
		time.Sleep(20 * time.Millisecond)
	}

	if err := m.Teardown(ctx, string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mountsUnder(state); len(ms) > 0 {
		t.Fatalf("mounts left: %v", ms)
	}
	if _, err := os.Stat(PodDir(state, string(pod.UID))); !os.IsNotExist(err) {
		t.Fatal("pod dir left")
	}
}
