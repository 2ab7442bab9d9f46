// Command nodelet-runtime runs the nodelet runtime daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/runtime"
)

func main() { daemon.Main(runtime.Spec()) }
