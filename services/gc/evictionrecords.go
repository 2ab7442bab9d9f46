package gc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// evictionRecords is gc's side of the evictions bucket: the records the
// eviction manager and the shutdown manager write (the runtime kills the
// pod, status fails it), written again after the bus's store was wiped and
// deleted once their pod is gone.
type evictionRecords struct {
	log   *slog.Logger
	w     *bus.Writer
	state evictionBook
}

// evictionBook is what evictionRecords needs of podState: the evictions it
// has seen and which of them are stale.
type evictionBook interface {
	noteEviction(ev *schemas.PodEviction)
	evictionsSnapshot() []*schemas.PodEviction
	staleEvictions() []string
}

var _ evictionBook = (*podState)(nil)

func newEvictionRecords(conn *bus.Conn, log *slog.Logger, state evictionBook) *evictionRecords {
	r := &evictionRecords{log: log, state: state}
	r.w = bus.NewWriter(conn, bus.BucketEvictions, r.rewrite)
	return r
}

// put writes ev to the evictions bucket and notes it in the pod state.
func (r *evictionRecords) put(ctx context.Context, ev *schemas.PodEviction) error {
	if _, _, err := r.w.Put(ctx, ev.UID, ev); err != nil {
		return err
	}
	r.state.noteEviction(ev)
	return nil
}

// rewrite writes every eviction again after the bus's store was wiped.
func (r *evictionRecords) rewrite() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ev := range r.state.evictionsSnapshot() {
		if _, _, err := r.w.Put(ctx, ev.UID, ev); err != nil {
			return fmt.Errorf("eviction of pod %s: %w", ev.UID, err)
		}
	}
	return nil
}

// forgetStaleEvictions deletes the evictions of pods that are gone.
func (r *evictionRecords) forgetStaleEvictions(ctx context.Context) {
	for _, uid := range r.state.staleEvictions() {
		if _, err := r.w.Delete(ctx, uid); err != nil {
			r.log.Error("Failed to delete eviction of a removed pod", "podUID", uid, "err", err)
		}
	}
}
