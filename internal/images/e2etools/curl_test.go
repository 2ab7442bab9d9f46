package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The curl commands of the e2e specs (test/e2e, test/e2e/framework/network),
// against a server like agnhost netexec's.
func TestCurlAsTheSpecsRunIt(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/hostName", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "netserver-0") })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.Header.Get("X-Test"), b)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/hostName", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewUnstartedServer(mux)
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	out := filepath.Join(t.TempDir(), "out")

	for _, tc := range []struct {
		cmd        string // after "curl", split on spaces
		code       int
		stdout     string
		stdoutHas  string
		outputFile string
	}{
		// node-pod http: busybox wget -T crashed on these flags.
		{cmd: "-g -q -s --max-time 15 --connect-timeout 1 " + srv.URL + "/hostName", stdout: "netserver-0"},
		{cmd: "-g -q -s " + srv.URL + "/hostName", stdout: "netserver-0"},
		{cmd: "-q -s --connect-timeout 5 " + hostPort + "/hostName", stdout: "netserver-0"},
		{cmd: "-g -q -s -o /dev/null -w %{http_code} " + srv.URL + "/nothing", stdout: "404"},
		{cmd: "-o /dev/null -i -q -s -w %{http_code} --connect-timeout 1 " + srv.URL + "/hostName", stdout: "200"},
		{cmd: "-i -q -s --connect-timeout 1 " + srv.URL + "/hostName", stdoutHas: "HTTP/1.1 200 OK\r\n"},
		{cmd: "-sIk " + tlsSrv.URL + "/hostName", stdoutHas: "HTTP/1.1 200 OK\r\n"},
		{cmd: "-k -XPOST -H X-Test:yes -d body " + tlsSrv.URL + "/echo", stdout: "POST yes body"},
		{cmd: "-s " + srv.URL + "/moved", stdoutHas: "Found"},
		{cmd: "-sL " + srv.URL + "/moved", stdout: "netserver-0"},
		{cmd: "-s -o " + out + " " + srv.URL + "/hostName", outputFile: "netserver-0"},
		{cmd: "-g -s --interface 127.0.0.1 --connect-timeout 3 " + srv.URL + "/hostName", stdout: "netserver-0"},
		{cmd: "-s -f " + srv.URL + "/nothing", code: curlHTTPError},
		{cmd: "-s " + tlsSrv.URL + "/hostName", code: curlTLS},
		{cmd: "-s --max-time 1 " + srv.URL + "/slow", code: curlTimeout},
		{cmd: "-s --connect-timeout 1 http://" + closedPort(t) + "/", code: curlConnect},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			code, stdout, stderr := runTool(t, "", append([]string{"curl"}, strings.Fields(tc.cmd)...)...)
			if code != tc.code {
				t.Fatalf("exit %d (stderr %q), want %d", code, stderr, tc.code)
			}
			if tc.stdoutHas != "" {
				if !strings.Contains(stdout, tc.stdoutHas) {
					t.Errorf("stdout %q, want it to contain %q", stdout, tc.stdoutHas)
				}
			} else if stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if tc.outputFile != "" {
				if b, err := os.ReadFile(out); err != nil || string(b) != tc.outputFile {
					t.Errorf("-o file: %q, %v; want %q", b, err, tc.outputFile)
				}
			}
		})
	}
}

// Without -s curl says why it failed; with -s only -S makes it.
func TestCurlErrors(t *testing.T) {
	url := "http://" + closedPort(t) + "/"
	if _, _, stderr := runTool(t, "", "curl", url); !strings.HasPrefix(stderr, "curl: (7) Failed to connect") {
		t.Errorf("stderr %q", stderr)
	}
	if _, _, stderr := runTool(t, "", "curl", "-s", url); stderr != "" {
		t.Errorf("-s: stderr %q", stderr)
	}
	if _, _, stderr := runTool(t, "", "curl", "-sS", url); stderr == "" {
		t.Errorf("-sS: no error shown")
	}
	if code, _, _ := runTool(t, "", "curl", "--proxy-insecure", url); code != curlUsage {
		t.Errorf("an unknown option: exit %d, want %d", code, curlUsage)
	}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
