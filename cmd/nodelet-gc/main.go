// Command nodelet-gc runs the nodelet gc daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/gc"
)

func main() { daemon.Main(gc.Spec()) }
