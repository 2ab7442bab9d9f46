// Command test-credential-provider is an image credential-provider plugin
// for the tests (credentialprovider.kubelet.k8s.io/v1 exec protocol): it
// reads a CredentialProviderRequest on stdin and answers the image's
// registry with the username of its --user argument and the password of
// $REG_PASSWORD, cached per registry for 5 minutes. In service-account
// token mode (a token in the request) the username is the service
// account's annotation nodelet.test/registry-user instead, and only if the
// token is a JWT. Each request's image (with " token" when it had one) is
// appended to $CALLS_FILE, so that a test can count the runs.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
)

func main() {
	user := flag.String("user", "", "the registry's username")
	flag.Parse()
	var req credentialproviderv1.CredentialProviderRequest
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "decoding the request:", err)
		os.Exit(1)
	}
	if req.APIVersion != credentialproviderv1.SchemeGroupVersion.String() || req.Kind != "CredentialProviderRequest" || req.Image == "" {
		fmt.Fprintf(os.Stderr, "unexpected request %+v\n", req)
		os.Exit(1)
	}
	username := *user
	line := req.Image
	if req.ServiceAccountToken != "" {
		if len(strings.Split(req.ServiceAccountToken, ".")) != 3 {
			fmt.Fprintln(os.Stderr, "the service account token is not a JWT")
			os.Exit(1)
		}
		username = req.ServiceAccountAnnotations["nodelet.test/registry-user"]
		line += " token"
	}
	if f := os.Getenv("CALLS_FILE"); f != "" {
		out, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(out, line)
			out.Close()
		}
	}
	registry, _, _ := strings.Cut(req.Image, "/")
	resp := credentialproviderv1.CredentialProviderResponse{
		CacheKeyType:  credentialproviderv1.RegistryPluginCacheKeyType,
		CacheDuration: &metav1.Duration{Duration: 5 * time.Minute},
		Auth: map[string]credentialproviderv1.AuthConfig{
			registry: {Username: username, Password: os.Getenv("REG_PASSWORD")},
		},
	}
	resp.APIVersion, resp.Kind = credentialproviderv1.SchemeGroupVersion.String(), "CredentialProviderResponse"
	if err := json.NewEncoder(os.Stdout).Encode(&resp); err != nil {
		os.Exit(1)
	}
}
