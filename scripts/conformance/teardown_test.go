package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
)

// fakeSuite stands in for e2e.test: it does what a spec does to the node —
// a pod the scheduler binds, pulled with imagePullPolicy Always from the
// registry stand-in, with configMap, emptyDir (tmpfs) and projected token
// volumes — writes a ginkgo JSON report with one passed and one failed spec,
// and leaves the pod running, as an interrupted suite would.
const fakeSuite = `#!/bin/bash
set -eu
for a in "$@"; do
	case $a in
	--list-images) echo registry.k8s.io/e2e-test-images/busybox:1.37.0-2; echo example.invalid/none:1; exit 0 ;;
	--kubectl-path=*) K=${a#*=} ;;
	--ginkgo.json-report=*) R=${a#*=} ;;
	esac
done
$K create namespace fake-e2e
$K -n fake-e2e create configmap cm --from-literal=a=b
for i in $(seq 1 100); do
	$K -n fake-e2e get serviceaccount default >/dev/null 2>&1 && break
	sleep 0.2
done
$K -n fake-e2e apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: registry.k8s.io/e2e-test-images/busybox:1.37.0-2
    imagePullPolicy: Always
    command: [sleep, "3600"]
    volumeMounts: [{name: cm, mountPath: /cm}, {name: mem, mountPath: /mem}]
  volumes:
  - {name: cm, configMap: {name: cm}}
  - {name: mem, emptyDir: {medium: Memory}}
EOF
$K -n fake-e2e wait --for=condition=Ready pod/p --timeout=180s
case "$($K -n fake-e2e get pod p -o jsonpath='{.spec.nodeName}')" in node-1|node-2) ;; *) exit 3 ;; esac
test "$($K get nodes --no-headers | grep -c ' Ready ')" = 2
iptables -S FORWARD | grep -q nodelet-cluster # the nodes are fenced in
cat >"$R" <<'EOF'
[{"PreRunStats":{"TotalSpecs":3,"SpecsThatWillRun":2},"SpecReports":[
 {"ContainerHierarchyTexts":["fake"],"LeafNodeText":"runs a pod","LeafNodeType":"It","State":"passed"},
 {"ContainerHierarchyTexts":["fake"],"LeafNodeText":"fails","LeafNodeType":"It","State":"failed","Failure":{"Message":"expected failure\nmore"}}]}]
EOF
exit 1
`

// TestRunLeavesNothingBehind runs the harness end to end with the real
// cluster, node, containerd and registry stand-in, and only the suite
// replaced, then looks for anything the run could have left behind.
func TestRunLeavesNothingBehind(t *testing.T) {
	testenv.RequiresRoot(t)
	k8sBin := buildTools(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := testenv.BuildBinaries(bin, "./cmd/...", "./scripts/conformance"); err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(dir, "e2e.fake")
	if err := os.WriteFile(suite, []byte(fakeSuite), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	report := filepath.Join(dir, "report", "r.json")
	before := mountsMatching("nodelet-cluster")

	cmd := exec.Command(filepath.Join(bin, "conformance"), "-k8s-bin", k8sBin, "-nodelet-bin", bin, "-e2e", suite,
		"-work", work, "-report", report, "-procs", "1", "-wait", "20m")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		suiteLog, _ := os.ReadFile(filepath.Join(dir, "report", "r.log"))
		t.Fatalf("conformance: %v (want exit 1 for the failed spec)\n%s\nthe suite's log:\n%s", err, out.String(), suiteLog)
	}
	for _, want := range []string{
		"1 passed, 1 failed, 0 skipped at run time, of 2 selected specs (3 in the suite)",
		"FAIL [failed] fake fails\n     expected failure\n",
		"1 image(s) of the whole suite have no stand-in",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "report", "r.missing-images")); err != nil || string(b) != "example.invalid/none:1\n" {
		t.Errorf("missing images list = %q, %v", b, err)
	}

	checkNothingLeft(t, out.String(), work, before)
	if _, err := os.Stat(report); err != nil {
		t.Errorf("report not kept: %v", err)
	}
}

// checkNothingLeft looks for anything of a run: processes, the nodes' pods
// and their mounts, namespaces, the bridge, iptables rules, cgroups, the
// scratch dir. The control plane has a dir of its own, named in the output.
// (The nodes' containerds are internal/cluster's to check: their slot dirs
// are taken by other tests next.)
func checkNothingLeft(t *testing.T, out, work string, before []string) {
	t.Helper()
	dirs := []string{work}
	m := regexp.MustCompile(`control plane at \S+ .*; logs in (/\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output names no control plane dir:\n%s", out)
	}
	dirs = append(dirs, m[1])
	for pid, args := range processes() {
		for _, d := range dirs {
			if strings.Contains(args, d) {
				t.Errorf("process %s left running: %s", pid, args)
			}
		}
	}
	for _, d := range dirs {
		if m := mountsMatching(d); len(m) > 0 {
			t.Errorf("mounts left under %s: %q", d, m)
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("dir %s left (%v)", d, err)
		}
	}
	if after := mountsMatching("nodelet-cluster"); len(after) != len(before) {
		t.Errorf("mounts left: %q", after)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "nlc-") {
		t.Errorf("node namespaces left: %s", out)
	}
	if out, err := exec.Command("ip", "link", "show", cluster.BridgeName).CombinedOutput(); err == nil {
		t.Errorf("bridge %s left: %s", cluster.BridgeName, out)
	}
	if rules, _ := exec.Command("iptables-save").Output(); strings.Contains(string(rules), "nodelet-cluster") {
		t.Errorf("iptables rules left:\n%s", rules)
	}
	if ms, _ := filepath.Glob("/sys/fs/cgroup/*/nlc-*"); len(ms) > 0 {
		t.Errorf("pod cgroups left: %q", ms)
	}
}

// A node that cannot start (here: a binary missing) fails the run at once,
// naming why, and the run still leaves nothing behind.
func TestRunFailsFastWhenTheNodeCannotStart(t *testing.T) {
	testenv.RequiresRoot(t)
	k8sBin := buildTools(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := testenv.BuildBinaries(bin, "./cmd/...", "./scripts/conformance"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(bin, "nodelet-server")); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	before := mountsMatching("nodelet-cluster")
	cmd := exec.Command(filepath.Join(bin, "conformance"), "-k8s-bin", k8sBin, "-nodelet-bin", bin, "-e2e", "/bin/false",
		"-work", work, "-report", filepath.Join(dir, "r.json"), "-procs", "1", "-wait", "20m")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out.String(), "nodelet-server not found") {
		t.Fatalf("conformance: %v (want exit 2 naming the missing nodelet-server)\n%s", err, out.String())
	}
	checkNothingLeft(t, out.String(), work, before)
}

// buildTools builds (or takes from the cache) what the harness needs but
// e2e.test, which the fake replaces.
func buildTools(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "controlplane.sh"), "tools",
		"kube-controller-manager", "kube-scheduler", "kube-proxy", "coredns", "agnhost", "nnp")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("controlplane.sh tools: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "KUBE_SCHEDULER="); ok {
			return filepath.Dir(v)
		}
	}
	t.Fatalf("controlplane.sh tools printed no paths:\n%s", out)
	return ""
}

func processes() map[string]string {
	out := map[string]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		out[e.Name()] = strings.ReplaceAll(string(b), "\x00", " ")
	}
	return out
}

func mountsMatching(s string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Two runs on one machine would share the node's link, address and work
// directory: the second exits at once naming the first, before it touches
// anything.
func TestSecondRunExitsNamingTheFirst(t *testing.T) {
	testenv.RequiresRoot(t)
	lock, err := daemon.Lock(lockDir, "conformance")
	if err != nil {
		t.Skipf("a conformance run is in progress on this machine: %v", err)
	}
	defer lock.Close()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := testenv.BuildBinaries(bin, "./scripts/conformance"); err != nil {
		t.Fatal(err)
	}
	// What the harness checks exists before it starts: empty stand-ins.
	k8sBin := filepath.Join(dir, "k8s")
	for _, f := range []string{filepath.Join(bin, "nodelet"), filepath.Join(k8sBin, "kube-controller-manager"),
		filepath.Join(k8sBin, "kube-scheduler"), filepath.Join(k8sBin, "kube-proxy"), filepath.Join(k8sBin, "coredns"),
		filepath.Join(k8sBin, "e2e.test")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	work := filepath.Join(dir, "work")
	out, err := exec.Command(filepath.Join(bin, "conformance"), "-k8s-bin", k8sBin, "-nodelet-bin", bin,
		"-work", work, "-report", filepath.Join(dir, "r.json"), "-procs", "1").CombinedOutput()
	var exit *exec.ExitError
	want := fmt.Sprintf("pid %d", os.Getpid())
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), want) {
		t.Fatalf("second run: %v\n%s\nwant exit 2 naming %s", err, out, want)
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Fatalf("the second run made its work directory: %v", err)
	}
}
