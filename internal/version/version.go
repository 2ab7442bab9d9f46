// Package version is nodelet's version, stamped at build time with
// -ldflags "-X github.com/nodelet/nodelet/internal/version.Version=...".
package version

// Version of nodelet; "v0.1.0-dev" for untagged builds.
var Version = "v0.1.0-dev"
