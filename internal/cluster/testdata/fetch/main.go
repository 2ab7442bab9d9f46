// Command fetch GETs a URL until it answers 200 (at most -tries times, a
// second apart) and prints the body: the cluster test's client, static and
// with Go's own resolver (busybox wget, statically linked against glibc,
// cannot resolve names in a container without glibc's NSS modules).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	tries := flag.Int("tries", 60, "attempts")
	flag.Parse()
	url := flag.Arg(0)
	c := &http.Client{Timeout: 3 * time.Second}
	var last error
	for range *tries {
		resp, err := c.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				os.Stdout.Write(body)
				return
			}
			err = fmt.Errorf("%s: %v", resp.Status, rerr)
		}
		last = err
		fmt.Fprintln(os.Stderr, err)
		time.Sleep(time.Second)
	}
	fmt.Fprintln(os.Stderr, "giving up:", last)
	os.Exit(1)
}
