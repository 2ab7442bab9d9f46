// Command nodelet-prober runs the nodelet prober daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/prober"
)

func main() { daemon.Main(prober.Spec()) }
