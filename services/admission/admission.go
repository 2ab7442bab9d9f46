// Package admission is nodelet-admission.
package admission

import (
	"context"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/daemon"
)

// Spec describes nodelet-admission to the daemon frame.
func Spec() daemon.Spec {
	return daemon.Spec{Component: bus.Admission, NeedsCRI: false, Run: Run}
}

// Run serves until ctx is done.
func Run(ctx context.Context, env *daemon.Env) error {
	<-ctx.Done()
	return nil
}
