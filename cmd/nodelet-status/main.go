// Command nodelet-status runs the nodelet status daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/status"
)

func main() { daemon.Main(status.Spec()) }
