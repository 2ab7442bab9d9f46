package daemon

import (
	"log/slog"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
)

// Deps are what every daemon is built from. Each daemon's Options embed
// them; Env.Deps gives a running daemon's, and tests fill them in.
type Deps struct {
	Config *config.Config
	Log    *slog.Logger
	Bus    *bus.Conn
	// Health says whether the daemon is ready and why not (the frame's
	// heartbeat); nil ignores it.
	Health func(ready bool, message string)
}

// Deps of the running daemon.
func (e *Env) Deps() Deps {
	return Deps{Config: e.Config, Log: e.Log, Bus: e.Bus, Health: e.SetHealth}
}

// SetHealth reports through Health when it is set.
func (d Deps) SetHealth(ready bool, message string) {
	if d.Health != nil {
		d.Health(ready, message)
	}
}
