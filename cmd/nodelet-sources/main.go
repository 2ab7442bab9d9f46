// Command nodelet-sources runs the nodelet sources daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/sources"
)

func main() { daemon.Main(sources.Spec()) }
