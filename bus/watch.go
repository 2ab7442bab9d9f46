package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nodelet/nodelet/schemas"
)

// UpdateKind tells what a watch update is.
type UpdateKind int

const (
	// Put: Key has a new Value.
	Put UpdateKind = iota
	// Deleted: Key was deleted or purged.
	Deleted
	// Synced: every key's current value has been delivered; live updates
	// follow.
	Synced
	// Reset: the bucket was recreated (the bus's store was wiped) or the
	// watch had to start over; forget what was seen, a fresh initial load
	// and Synced follow.
	Reset
)

func (k UpdateKind) String() string {
	return [...]string{"put", "deleted", "synced", "reset"}[k]
}

// Update is one change seen by Watch.
type Update[T any] struct {
	Kind     UpdateKind
	Key      string
	Value    *T
	Envelope *schemas.Envelope
	Revision uint64
	// Created is when the bucket's stream the update comes from was made:
	// it changes when the bus's store is wiped, and tells which store a
	// value came from (StreamCreated says which is current).
	Created time.Time
}

// Watch runs a Mirror of the keys of bucket matching filter (">" for all)
// with fn as its callback, until ctx is done (see Mirror for what fn hears
// and what happens when the watch is lost). It returns ctx's error.
func Watch[T any, PT interface {
	*T
	schemas.Message
}](ctx context.Context, c *Conn, bucket, filter string, fn func(Update[T])) error {
	return NewMirror[T, PT](c, bucket, filter, fn).Run(ctx)
}

// StreamCreated is when bucket's stream was made: a value whose
// Update.Created differs came from a store that has since been wiped.
func StreamCreated(ctx context.Context, c *Conn, bucket string) (time.Time, error) {
	return streamCreated(ctx, c, bucket)
}

func streamCreated(ctx context.Context, c *Conn, bucket string) (time.Time, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.JS.Stream(cctx, streamOf(bucket))
	if err != nil {
		return time.Time{}, err
	}
	if s.CachedInfo() == nil {
		return time.Time{}, errors.New("no stream info")
	}
	return s.CachedInfo().Created, nil
}
