package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// imageGC is the kubelet's image garbage collector
// (pkg/kubelet/images/image_gc_manager.go realImageGCManager): it keeps the
// images' first-seen and last-used times (in the images bucket, so that the
// least-recently-used order survives a restart) and removes unused images by
// age and by the image filesystem's thresholds; the eviction manager asks it
// to delete every unused image under disk pressure.
type imageGC struct {
	policy       *config.GCConfig
	sandboxImage string
	log          *slog.Logger
	clock        clock.Clock
	began        time.Time // gc's start: imageMaximumGCAge counts from it
	rt           imageContainers
	img          imageService
	measure      imageFsMeasurer
	events       nodeEvents
	w            *bus.Writer // the images bucket

	mu           sync.Mutex
	records      map[string]*schemas.ImageRecord // by image ID
	recordsReady bool
	prevFailed   bool
}

// imageContainers is the part of CRI's runtime service image GC uses: the
// images the containers use, as their image or mounted as a volume.
type imageContainers interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
}

// imageService is the part of CRI's image service image GC uses.
type imageService interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error
}

// imageFsMeasurer measures the image filesystem.
type imageFsMeasurer interface {
	NodeStats(ctx context.Context) (*NodeStats, error)
}

var (
	_ imageContainers = (internalapi.RuntimeService)(nil)
	_ imageService    = (internalapi.ImageManagerService)(nil)
	_ imageFsMeasurer = (Measurer)(nil)
	_ nodeEvents      = (*eventRecorder)(nil)
)

func newImageGC(conn *bus.Conn, ig *imageGC) *imageGC {
	ig.records = map[string]*schemas.ImageRecord{}
	ig.w = bus.NewWriter(conn, bus.BucketImages, func() error {
		// The store was wiped: read it again (finding nothing) and write
		// every record again at the next pass.
		ig.mu.Lock()
		ig.recordsReady = false
		ig.mu.Unlock()
		return nil
	})
	return ig
}

// imageEvictionInfo is one unused image considered for removal.
type imageEvictionInfo struct {
	id       string
	tags     []string
	size     int64
	first    time.Time
	lastUsed time.Time
}

// imageGCResult says what an image GC pass removed, in order.
type imageGCResult struct {
	Removed []string // image IDs
	Freed   int64
}

// ImageRecordKey is the images bucket key of an image ID: KV keys allow
// only [-/_=.a-zA-Z0-9], so anything else (the ':' of sha256:...) becomes '_'.
func ImageRecordKey(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r == '-', r == '/', r == '_', r == '=', r == '.':
			return r
		}
		return '_'
	}, id)
}

// loadImageRecords reads the images bucket once (and again after the bus's
// store was wiped). Callers hold mu.
func (ig *imageGC) loadImageRecords(ctx context.Context) error {
	if ig.recordsReady {
		return nil
	}
	keys, err := ig.w.Keys(ctx)
	if err != nil {
		return fmt.Errorf("load image records: %w", err)
	}
	for _, k := range keys {
		data, _, ok, err := ig.w.Data(ctx, k)
		if err != nil {
			return fmt.Errorf("load image records: %w", err)
		}
		var rec schemas.ImageRecord
		if !ok || json.Unmarshal(data, &rec) != nil || rec.ID == "" {
			ig.log.Error("Skipping image record that does not decode", "key", k)
			continue
		}
		if prev := ig.records[rec.ID]; prev == nil || rec.LastUsed.After(prev.LastUsed) {
			ig.records[rec.ID] = &rec
		}
	}
	// After a wipe, what is only in memory is written again below.
	ig.recordsReady = true
	return nil
}

// detectImages is the kubelet's detectImages: every image the runtime has
// gets a record (first seen now when new), images used by any container —
// running or not, nodelet's or not — get lastUsed = now, and records of
// images that are gone are dropped. Records are written to the images
// bucket only when they changed. It returns the images in use and the
// runtime's images by ID.
func (ig *imageGC) detectImages(ctx context.Context, now time.Time) (map[string]bool, map[string]*runtimeapi.Image, error) {
	if err := ig.loadImageRecords(ctx); err != nil {
		return nil, nil, err
	}
	images, err := ig.img.ListImages(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("list images: %w", err)
	}
	containers, err := ig.rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("list containers: %w", err)
	}
	refs := map[string]bool{}
	for _, c := range containers {
		refs[c.GetImageRef()] = true
		refs[c.GetImage().GetImage()] = true
		// The kubelet's handleImageVolumes: an image mounted as a volume
		// is in use too. A container gone since the list counts nothing.
		st, err := ig.rt.ContainerStatus(ctx, c.GetId(), false)
		if err != nil {
			continue
		}
		for _, m := range st.GetStatus().GetMounts() {
			if img := m.GetImage().GetImage(); img != "" {
				refs[img] = true
			}
		}
	}
	// The sandbox image is never collected, even when no sandbox runs.
	refs[ig.sandboxImage] = true
	if st, err := ig.img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ig.sandboxImage}, false); err == nil && st.GetImage() != nil {
		refs[st.GetImage().GetId()] = true
	}
	inUse := map[string]bool{}
	byID := map[string]*runtimeapi.Image{}
	var errs []error
	for _, img := range images {
		id := img.GetId()
		byID[id] = img
		used := refs[id]
		for _, r := range append(slices.Clone(img.GetRepoTags()), img.GetRepoDigests()...) {
			used = used || refs[r]
		}
		if used {
			inUse[id] = true
		}
		rec := ig.records[id]
		if rec == nil {
			rec = &schemas.ImageRecord{ID: id, FirstSeen: now.UTC()}
			ig.records[id] = rec
		}
		rec.RepoTags = img.GetRepoTags()
		if used {
			rec.LastUsed = now.UTC()
		}
		if _, _, err := ig.w.Put(ctx, ImageRecordKey(id), rec); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range ig.records {
		if byID[id] == nil {
			delete(ig.records, id)
			if _, err := ig.w.Delete(ctx, ImageRecordKey(id)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return inUse, byID, errors.Join(errs...)
}

// imagesInEvictionOrder lists the images that may be removed — not in use,
// not pinned by the runtime, not the sandbox image — least recently used
// first, ties broken by first seen.
func (ig *imageGC) imagesInEvictionOrder(ctx context.Context, now time.Time) ([]imageEvictionInfo, error) {
	inUse, byID, err := ig.detectImages(ctx, now)
	if err != nil {
		return nil, err
	}
	var out []imageEvictionInfo
	for id, img := range byID {
		if inUse[id] || img.GetPinned() {
			continue
		}
		rec := ig.records[id]
		out = append(out, imageEvictionInfo{id: id, tags: img.GetRepoTags(), size: int64(img.GetSize()),
			first: rec.FirstSeen, lastUsed: rec.LastUsed})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].lastUsed.Equal(out[j].lastUsed) {
			if out[i].first.Equal(out[j].first) {
				return out[i].id < out[j].id
			}
			return out[i].first.Before(out[j].first)
		}
		return out[i].lastUsed.Before(out[j].lastUsed)
	})
	return out, nil
}

// garbageCollect is the kubelet's realImageGCManager.GarbageCollect:
// images unused for longer than imageMaximumGCAge go first; then, when the
// image filesystem is at or above imageGCHighThresholdPercent, unused images
// go least recently used first until it is at imageGCLowThresholdPercent.
func (ig *imageGC) garbageCollect(ctx context.Context) (imageGCResult, error) {
	ig.mu.Lock()
	defer ig.mu.Unlock()
	res, err := ig.garbageCollectLocked(ctx)
	if err != nil {
		if ig.prevFailed {
			// As the kubelet: only repeated failures are an event; the
			// first may be stats not yet there.
			ig.log.Error("Image garbage collection failed multiple times in a row", "err", err)
			ig.events.nodeEvent(corev1.EventTypeWarning, "ImageGCFailed", err.Error())
		} else {
			ig.log.Error("Image garbage collection failed once", "err", err)
		}
		ig.prevFailed = true
		return res, err
	}
	ig.prevFailed = false
	return res, nil
}

func (ig *imageGC) garbageCollectLocked(ctx context.Context) (imageGCResult, error) {
	var res imageGCResult
	freeTime := ig.clock.Now()
	images, err := ig.imagesInEvictionOrder(ctx, freeTime)
	if err != nil {
		return res, err
	}
	images, err = ig.freeOldImages(ctx, images, freeTime, &res)
	if err != nil {
		return res, err
	}
	ns, err := ig.measure.NodeStats(ctx)
	if ns == nil || ns.ImageFs == nil {
		return res, fmt.Errorf("image filesystem stats: %w", err)
	}
	capacity, available := ns.ImageFs.Capacity, ns.ImageFs.Available
	if available > capacity {
		ig.log.Info("Availability is larger than capacity", "available", available, "capacity", capacity)
		available = capacity
	}
	if capacity == 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		ig.events.nodeEvent(corev1.EventTypeWarning, "InvalidDiskCapacity", err.Error())
		return res, err
	}
	policy := ig.policy
	usagePercent := 100 - int(available*100/capacity)
	if usagePercent < policy.ImageGCHighThresholdPercent {
		return res, nil
	}
	amountToFree := capacity*int64(100-policy.ImageGCLowThresholdPercent)/100 - available
	ig.log.Info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
		"usage", usagePercent, "highThreshold", policy.ImageGCHighThresholdPercent, "amountToFree", amountToFree, "lowThreshold", policy.ImageGCLowThresholdPercent)
	freed, err := ig.freeSpace(ctx, amountToFree, freeTime, images, &res)
	if err != nil {
		return res, err
	}
	if freed < amountToFree {
		// The disk is full of something other than unused images (writable
		// layers, logs, images in use): v1.37's wording, which replaced
		// "Failed to garbage collect required amount of images. Attempted
		// to free X bytes, but only found Y bytes eligible to free."
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usagePercent, formatSize(capacity), freed)
		ig.events.nodeEvent(corev1.EventTypeWarning, "FreeDiskSpaceFailed", msg)
		return res, errors.New(msg)
	}
	return res, nil
}

// formatSize is the kubelet's formatSize (image_gc_manager.go): bytes in
// binary units with one decimal.
func formatSize(sizeBytes int64) string {
	const (
		kib = 1024
		mib = 1024 * kib
		gib = 1024 * mib
		tib = 1024 * gib
	)
	size := float64(sizeBytes)
	switch {
	case size < kib:
		return fmt.Sprintf("%d B", sizeBytes)
	case size < mib:
		return fmt.Sprintf("%.1f KiB", size/kib)
	case size < gib:
		return fmt.Sprintf("%.1f MiB", size/mib)
	case size < tib:
		return fmt.Sprintf("%.1f GiB", size/gib)
	default:
		return fmt.Sprintf("%.1f TiB", size/tib)
	}
}

// deleteUnusedImages removes every unused image old enough: the eviction
// manager's reclaim under disk pressure.
func (ig *imageGC) deleteUnusedImages(ctx context.Context) (imageGCResult, error) {
	ig.mu.Lock()
	defer ig.mu.Unlock()
	var res imageGCResult
	freeTime := ig.clock.Now()
	images, err := ig.imagesInEvictionOrder(ctx, freeTime)
	if err != nil {
		return res, err
	}
	_, err = ig.freeSpace(ctx, math.MaxInt64, freeTime, images, &res)
	return res, err
}

// freeOldImages removes images unused for longer than imageMaximumGCAge, once
// gc itself has run that long (before, lastUsed may be older than the truth).
func (ig *imageGC) freeOldImages(ctx context.Context, images []imageEvictionInfo, freeTime time.Time, res *imageGCResult) ([]imageEvictionInfo, error) {
	maxAge := ig.policy.ImageMaximumGCAge
	if maxAge == 0 || freeTime.Sub(ig.began) <= maxAge {
		return images, nil
	}
	var errs []error
	var remaining []imageEvictionInfo
	for _, img := range images {
		if freeTime.Sub(img.lastUsed) > maxAge {
			if err := ig.freeImage(ctx, img, imageGCReasonAge, res); err != nil {
				errs = append(errs, err)
				remaining = append(remaining, img)
			}
			continue
		}
		remaining = append(remaining, img)
	}
	if len(errs) > 0 {
		return remaining, fmt.Errorf("wanted to free images older than %v, encountered errors in image deletion: %w", maxAge, errors.Join(errs...))
	}
	return remaining, nil
}

// freeSpace removes images in order until bytesToFree are freed, skipping
// those first seen less than imageMinimumGCAge ago (just pulled, about to be
// used).
func (ig *imageGC) freeSpace(ctx context.Context, bytesToFree int64, freeTime time.Time, images []imageEvictionInfo, res *imageGCResult) (int64, error) {
	var errs []error
	var freed int64
	for _, img := range images {
		if ctx.Err() != nil {
			break
		}
		if freeTime.Sub(img.first) < ig.policy.ImageMinimumGCAge {
			continue
		}
		if err := ig.freeImage(ctx, img, imageGCReasonSpace, res); err != nil {
			errs = append(errs, err)
			continue
		}
		freed += img.size
		if freed >= bytesToFree {
			break
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w", bytesToFree, freed, errors.Join(errs...))
	}
	return freed, nil
}

func (ig *imageGC) freeImage(ctx context.Context, img imageEvictionInfo, reason string, res *imageGCResult) error {
	ig.log.Info("Removing image to free bytes", "imageID", img.id, "repoTags", img.tags, "size", img.size, "lastUsed", img.lastUsed, "reason", reason)
	if err := ig.img.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.id}); err != nil && !crierrors.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", img.id, err)
	}
	delete(ig.records, img.id)
	if _, err := ig.w.Delete(ctx, ImageRecordKey(img.id)); err != nil {
		ig.log.Error("Failed to delete image record", "imageID", img.id, "err", err)
	}
	removedTotal.WithLabelValues(objImage).Inc()
	reclaimedBytes.WithLabelValues(objImage).Add(float64(img.size))
	imagesCollected.WithLabelValues(reason).Inc()
	kubeletImagesCollected.WithLabelValues(reason).Inc()
	res.Removed = append(res.Removed, img.id)
	res.Freed += img.size
	return nil
}
