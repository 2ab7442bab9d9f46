package main

import (
	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/supervisor"
)

// withContainerd makes the supervisor start a private containerd first and
// stop it last (runtime.manageContainerd).
func withContainerd(o *supervisor.Options, cfg *config.Config) {
	// Filled in once services/common/containerd lands.
}
