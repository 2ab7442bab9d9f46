package e2e_test

// Helpers of the kubelet API tests: running kubectl and nodelet, HTTP
// requests to the node, Prometheus text, a process's listening ports.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
)

// runCommand runs a command to its end (bounded by timeout) and returns its
// stdout, stderr and exit code.
func runCommand(t testing.TB, timeout time.Duration, env []string, stdin, path string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", filepath.Base(path), args, err)
	}
	return out.String(), errb.String(), 0
}

// kubectlArgs are the real kubectl's arguments as the cluster admin.
func kubectlArgs(args ...string) []string {
	return append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)
}

// kubectl runs the real kubectl as the cluster admin and returns its stdout,
// stderr and exit code.
func kubectl(t testing.TB, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return kubectlEnv(t, nil, stdin, args...)
}

// kubectlEnv is kubectl with extra environment variables.
func kubectlEnv(t testing.TB, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, 90*time.Second, env, stdin, cp.Kubectl, kubectlArgs(args...)...)
}

func mustKubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errs, code := kubectl(t, stdin, args...)
	if code != 0 {
		t.Fatalf("kubectl %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// kubectlStream starts a long-running kubectl (logs -f, attach,
// port-forward) and returns a scanner over its stdout, its stderr, and
// wait, which waits for it to end; the command is killed when ctx ends
// or the test does.
func kubectlStream(t testing.TB, ctx context.Context, env []string, args ...string) (*bufio.Scanner, *testenv.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, cp.Kubectl, kubectlArgs(args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &testenv.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	waited := false
	wait := func() error {
		if !waited {
			waited, werr = true, <-done
		}
		return werr
	}
	t.Cleanup(func() { cancel(); _ = wait() })
	return bufio.NewScanner(stdout), errb, wait
}

// nodeletCLI runs bin/nodelet against node n.
func nodeletCLI(t testing.TB, n *e2e.Node, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, 60*time.Second, nil, stdin, filepath.Join(binDir, "nodelet"), args...)
}

// httpsGet fetches url with c, with a bearer token when not empty, and
// returns the status code and body.
func httpsGet(t testing.TB, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// insecureClient trusts any serving certificate and presents certs.
func insecureClient(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}}
}

// parseMetrics parses a Prometheus text exposition.
func parseMetrics(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v\n%.2000s", err, text)
	}
	return fams
}

// hasSeries says whether family name has a series whose labels include want.
func hasSeries(fams map[string]*dto.MetricFamily, name string, want map[string]string) bool {
	for _, m := range fams[name].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && l[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// listeningTCPPorts are the TCP ports process pid listens on, from its
// socket descriptors and /proc/<pid>/net/tcp{,6}.
func listeningTCPPorts(t testing.TB, pid int) []int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			// local_address st ... inode; st 0A is LISTEN.
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			var p int
			_, _ = fmt.Sscanf(hexPort, "%X", &p)
			ports = append(ports, p)
		}
	}
	sort.Ints(ports)
	return ports
}
