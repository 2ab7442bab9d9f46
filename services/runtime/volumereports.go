package runtime

import (
	"context"
	"log/slog"
	"slices"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// volumeReporter publishes what the volume manager knows of the node's
// volumes into the runtime bucket: their stats (volumestats) and the
// attachable volumes in use (volumesinuse).
type volumeReporter struct {
	volumes VolumeManager
	bus     *bus.Conn
	clock   Clock
	log     *slog.Logger
	// statsPeriod is how often volumestats is published.
	statsPeriod time.Duration
}

// statsLoop publishes the pods' volume stats every statsPeriod (runtime
// bucket, key volumestats), for nodelet-server's /stats/summary: the
// kubelet's volume stats calculators, which also run every minute
// (volumeStatsAggPeriod). A node without pods writes one empty record.
func (r *volumeReporter) statsLoop(ctx context.Context) {
	v, ok := r.volumes.(volumeStatser)
	if !ok {
		return
	}
	t := r.clock.NewTicker(r.statsPeriod)
	defer t.Stop()
	wroteEmpty := false
	for {
		stats := v.VolumeStats(ctx)
		if len(stats) > 0 || !wroteEmpty {
			rec := &schemas.PodVolumeStats{Time: r.clock.Now().UTC()}
			for uid, st := range stats {
				if len(st.Volumes) > 0 {
					if rec.Pods == nil {
						rec.Pods = map[string][]statsapi.VolumeStats{}
					}
					rec.Pods[uid] = st.Volumes
				}
				if st.Ephemeral.UsedBytes != nil {
					if rec.Ephemeral == nil {
						rec.Ephemeral = map[string]statsapi.FsStats{}
					}
					rec.Ephemeral[uid] = st.Ephemeral
				}
			}
			if _, err := r.bus.Put(ctx, bus.BucketRuntime, bus.KeyVolumeStats, rec); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("Cannot publish volume stats", "err", err)
				}
			} else {
				wroteEmpty = len(stats) == 0
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// volumeStatser measures the pods' volumes.
type volumeStatser interface {
	VolumeStats(context.Context) map[string]volumes.PodStats
}

var _ volumeStatser = (*volumes.Manager)(nil)

// inUseLoop publishes the node's attachable volumes in use (runtime
// bucket, key volumesinuse) whenever they change, for nodelet-status to
// report as the Node's status.volumesInUse; checked again every 10s.
func (r *volumeReporter) inUseLoop(ctx context.Context) {
	v, ok := r.volumes.(interface {
		VolumesInUse() []string
		InUseChanged() <-chan struct{}
	})
	if !ok {
		return
	}
	t := r.clock.NewTicker(10 * time.Second)
	defer t.Stop()
	var last []string
	first := true
	for {
		names := v.VolumesInUse()
		if first || !slices.Equal(names, last) {
			if _, err := r.bus.Put(ctx, bus.BucketRuntime, bus.KeyVolumesInUse, &schemas.VolumesInUse{Names: names}); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("Cannot publish the volumes in use", "err", err)
				}
			} else {
				last, first = names, false
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-v.InUseChanged():
		case <-t.C():
		}
	}
}
