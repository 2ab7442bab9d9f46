package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// curlOptions are the curl flags the e2e specs pass (test/e2e: -g -q -s -S
// -f -L -k -i -I -v, -o, -w with %{http_code}, -m/--max-time,
// --connect-timeout, -X, -H, -d, --interface).
type curlOptions struct {
	urls           []string
	silent, errors bool // -s, -S
	fail           bool // -f: an HTTP error is exit 22, without the body
	follow         bool // -L
	insecure       bool // -k
	include, head  bool // -i, -I
	verbose        bool // -v
	output         string
	writeOut       string
	maxTime        time.Duration
	connectTimeout time.Duration
	method         string
	headers        []string
	data           *string
	userAgent      string
	iface          string
}

// curl's exit codes the specs can see (curl(1), EXIT CODES).
const (
	curlUsage      = 2
	curlResolve    = 6
	curlConnect    = 7
	curlHTTPError  = 22
	curlWrite      = 23
	curlTimeout    = 28
	curlTLS        = 35
	curlEmptyReply = 52
	curlRecv       = 56
)

func curl(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	o, err := parseCurl(args)
	if err != nil {
		fmt.Fprintf(stderr, "curl: %v\n", err)
		return curlUsage
	}
	if len(o.urls) == 0 {
		fmt.Fprintln(stderr, "curl: no URL specified")
		return curlUsage
	}
	out := stdout
	if o.output != "" && o.output != "-" {
		f, err := os.Create(o.output)
		if err != nil {
			fmt.Fprintf(stderr, "curl: (23) %v\n", err)
			return curlWrite
		}
		defer f.Close()
		out = f
	}
	code := 0
	for _, u := range o.urls {
		if code = o.fetch(u, out, stdout, stderr); code != 0 {
			break
		}
	}
	return code
}

func parseCurl(args []string) (*curlOptions, error) {
	o := &curlOptions{userAgent: "curl/8 (nodelet e2etools)"}
	value := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("option %s: requires parameter", flag)
		}
		*i++
		return args[*i], nil
	}
	seconds := func(s, flag string) (time.Duration, error) {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("option %s: expected a proper numerical parameter", flag)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	// set applies one option; v is its value for those that take one.
	set := func(flag, v string) error {
		var err error
		switch flag {
		case "-s", "--silent":
			o.silent = true
		case "-S", "--show-error":
			o.errors = true
		case "-f", "--fail":
			o.fail = true
		case "-L", "--location":
			o.follow = true
		case "-k", "--insecure":
			o.insecure = true
		case "-i", "--include":
			o.include = true
		case "-I", "--head":
			o.head = true
		case "-v", "--verbose":
			o.verbose = true
		case "-q", "--disable", "-g", "--globoff", "-N", "--no-buffer", "--compressed", "--http1.1":
			// -q: no .curlrc is read anyway; -g: URLs are never globbed.
		case "-o", "--output":
			o.output = v
		case "-w", "--write-out":
			o.writeOut = v
		case "-m", "--max-time":
			o.maxTime, err = seconds(v, flag)
		case "--connect-timeout":
			o.connectTimeout, err = seconds(v, flag)
		case "-X", "--request":
			o.method = v
		case "-H", "--header":
			o.headers = append(o.headers, v)
		case "-d", "--data", "--data-raw", "--data-binary":
			o.data = &v
		case "-A", "--user-agent":
			o.userAgent = v
		case "--interface":
			o.iface = v
		default:
			return fmt.Errorf("option %s: is unknown to this curl stand-in", flag)
		}
		return err
	}
	takesValue := map[string]bool{"-o": true, "--output": true, "-w": true, "--write-out": true,
		"-m": true, "--max-time": true, "--connect-timeout": true, "-X": true, "--request": true,
		"-H": true, "--header": true, "-d": true, "--data": true, "--data-raw": true,
		"--data-binary": true, "-A": true, "--user-agent": true, "--interface": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "--"):
			v := ""
			if takesValue[a] {
				var err error
				if v, err = value(&i, a); err != nil {
					return nil, err
				}
			}
			if err := set(a, v); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			// A cluster of short flags (-sIk); a flag that takes a value
			// takes the rest of the cluster (-XGET) or the next argument.
			for j := 1; j < len(a); j++ {
				flag := "-" + a[j:j+1]
				v := ""
				if takesValue[flag] {
					if j+1 < len(a) {
						v = a[j+1:]
					} else {
						var err error
						if v, err = value(&i, flag); err != nil {
							return nil, err
						}
					}
					j = len(a)
				}
				if err := set(flag, v); err != nil {
					return nil, err
				}
			}
		default:
			o.urls = append(o.urls, a)
		}
	}
	return o, nil
}

// fetch makes one request and writes what curl would: the response (with
// its headers for -i or -I) to out, -w's text to stdout, -v's trace and
// errors to stderr.
func (o *curlOptions) fetch(rawURL string, out, stdout, stderr io.Writer) int {
	if !strings.Contains(rawURL, "://") {
		rawURL = "http://" + rawURL // curl's default scheme
	}
	ctx := context.Background()
	if o.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.maxTime)
		defer cancel()
	}
	method := o.method
	var body io.Reader
	switch {
	case method != "":
	case o.head:
		method = http.MethodHead
	case o.data != nil:
		method = http.MethodPost
	default:
		method = http.MethodGet
	}
	if o.data != nil {
		body = strings.NewReader(*o.data)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	if err != nil {
		return o.failed(stderr, err)
	}
	req.Header.Set("User-Agent", o.userAgent)
	req.Header.Set("Accept", "*/*")
	if o.data != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range o.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); strings.EqualFold(k, "Host") {
			req.Host = strings.TrimSpace(v)
		} else {
			req.Header.Set(k, strings.TrimSpace(v))
		}
	}
	dialer := &net.Dialer{Timeout: o.connectTimeout}
	if o.iface != "" {
		ip, err := interfaceIP(o.iface)
		if err != nil {
			fmt.Fprintf(stderr, "curl: (45) Failed binding local connection end: %v\n", err)
			return 45
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	// The address dialled, for -w's %{remote_ip}; a dial may finish after
	// a timeout has ended the request.
	var remote atomic.Value
	client := &http.Client{
		Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err == nil {
					remote.Store(c.RemoteAddr().String())
					if o.verbose {
						fmt.Fprintf(stderr, "* Connected to %s (%s)\n", addr, c.RemoteAddr())
					}
				}
				return c, err
			},
			TLSClientConfig:    &tls.Config{InsecureSkipVerify: o.insecure}, // -k
			DisableCompression: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			if o.follow {
				return nil
			}
			return http.ErrUseLastResponse
		},
	}
	if o.verbose {
		fmt.Fprintf(stderr, "> %s %s HTTP/1.1\n> Host: %s\n>\n", req.Method, req.URL.RequestURI(), req.URL.Host)
	}
	resp, err := client.Do(req)
	if err != nil {
		o.writeOutput(stdout, nil, &remote, 0, rawURL)
		return o.failed(stderr, err)
	}
	defer resp.Body.Close()
	head := fmt.Sprintf("%s %s\r\n", resp.Proto, resp.Status)
	var keys []string
	for k := range resp.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range resp.Header[k] {
			head += k + ": " + v + "\r\n"
		}
	}
	head += "\r\n"
	if o.verbose {
		fmt.Fprint(stderr, "< "+strings.ReplaceAll(strings.TrimSuffix(head, "\r\n"), "\r\n", "\n< ")+"\n")
	}
	if o.fail && resp.StatusCode >= 400 {
		o.writeOutput(stdout, resp, &remote, 0, rawURL)
		o.errorf(stderr, curlHTTPError, "The requested URL returned error: %d", resp.StatusCode)
		return curlHTTPError
	}
	if o.include || o.head {
		if _, err := io.WriteString(out, head); err != nil {
			o.errorf(stderr, curlWrite, "Failure writing output: %v", err)
			return curlWrite
		}
	}
	n, err := io.Copy(out, resp.Body)
	o.writeOutput(stdout, resp, &remote, n, rawURL)
	if err != nil {
		return o.failed(stderr, err)
	}
	return 0
}

// failed reports a failed transfer with curl's exit code for it.
func (o *curlOptions) failed(stderr io.Writer, err error) int {
	code, msg := curlExit(err)
	o.errorf(stderr, code, "%s", msg)
	return code
}

// errorf prints "curl: (N) message" unless -s without -S.
func (o *curlOptions) errorf(stderr io.Writer, code int, format string, args ...any) {
	if o.silent && !o.errors {
		return
	}
	fmt.Fprintf(stderr, "curl: (%d) %s\n", code, fmt.Sprintf(format, args...))
}

func curlExit(err error) (int, string) {
	var dnsErr *net.DNSError
	var netErr net.Error
	var opErr *net.OpError
	var recErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &dnsErr):
		return curlResolve, "Could not resolve host: " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return curlTimeout, "Operation timed out"
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return curlConnect, fmt.Sprintf("Failed to connect to %v: %v", opErr.Addr, cause(err))
	case errors.As(err, &recErr), errors.As(err, &certErr):
		return curlTLS, "SSL connect error: " + err.Error()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return curlEmptyReply, "Empty reply from server"
	}
	return curlRecv, "Failure when receiving data from the peer: " + err.Error()
}

// writeOutput prints -w's format with the variables the specs use.
func (o *curlOptions) writeOutput(stdout io.Writer, resp *http.Response, remote *atomic.Value, size int64, url string) {
	if o.writeOut == "" {
		return
	}
	vars := map[string]string{
		"http_code":     "000",
		"response_code": "000",
		"size_download": strconv.FormatInt(size, 10),
		"url_effective": url,
		"remote_ip":     "",
		"remote_port":   "",
		"content_type":  "",
	}
	if resp != nil {
		vars["http_code"] = fmt.Sprintf("%03d", resp.StatusCode)
		vars["response_code"] = vars["http_code"]
		vars["content_type"] = resp.Header.Get("Content-Type")
	}
	if addr, ok := remote.Load().(string); ok {
		if h, p, err := net.SplitHostPort(addr); err == nil {
			vars["remote_ip"], vars["remote_port"] = h, p
		}
	}
	var b strings.Builder
	f := o.writeOut
	for i := 0; i < len(f); i++ {
		switch {
		case strings.HasPrefix(f[i:], "%{"):
			end := strings.IndexByte(f[i:], '}')
			if end < 0 {
				b.WriteString(f[i:])
				i = len(f)
				continue
			}
			b.WriteString(vars[f[i+2:i+end]])
			i += end
		case strings.HasPrefix(f[i:], "%%"):
			b.WriteByte('%')
			i++
		case f[i] == '\\' && i+1 < len(f):
			switch f[i+1] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			default:
				b.WriteByte(f[i+1])
			}
			i++
		default:
			b.WriteByte(f[i])
		}
	}
	_, _ = io.WriteString(stdout, b.String())
}

// interfaceIP is --interface's address: an IP, or a link's first address.
func interfaceIP(name string) (net.IP, error) {
	if ip := net.ParseIP(name); ip != nil {
		return ip, nil
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			return n.IP, nil
		}
	}
	return nil, fmt.Errorf("%s has no address", name)
}
