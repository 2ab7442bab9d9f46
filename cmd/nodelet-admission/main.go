// Command nodelet-admission runs the nodelet admission daemon.
package main

import (
	"github.com/nodelet/nodelet/services/common/daemon"
	"github.com/nodelet/nodelet/services/admission"
)

func main() { daemon.Main(admission.Spec()) }
