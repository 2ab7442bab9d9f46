// Command nodelet-server runs the nodelet kubelet API daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/server"
)

func main() { daemon.Main(server.Spec()) }
