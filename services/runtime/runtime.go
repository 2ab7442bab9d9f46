// Package runtime is nodelet-runtime.
package runtime

import (
	"context"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/daemon"
)

// Spec describes nodelet-runtime to the daemon frame.
func Spec() daemon.Spec {
	return daemon.Spec{Component: bus.Runtime, NeedsCRI: true, Run: Run}
}

// Run serves until ctx is done.
func Run(ctx context.Context, env *daemon.Env) error {
	<-ctx.Done()
	return nil
}
