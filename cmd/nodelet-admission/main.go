// Command nodelet-admission runs the nodelet admission daemon.
package main

import (
	"github.com/nodelet/nodelet/services/admission"
	"github.com/nodelet/nodelet/services/common/daemon"
)

func main() { daemon.Main(admission.Spec()) }
