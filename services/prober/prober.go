// Package prober is nodelet-prober.
package prober

import (
	"context"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/daemon"
)

// Spec describes nodelet-prober to the daemon frame.
func Spec() daemon.Spec {
	return daemon.Spec{Component: bus.Prober, NeedsCRI: true, Run: Run}
}

// Run serves until ctx is done.
func Run(ctx context.Context, env *daemon.Env) error {
	<-ctx.Done()
	return nil
}
