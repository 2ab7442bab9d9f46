package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	crierrors "k8s.io/cri-api/pkg/errors"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/schemas"
)

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
// store was wiped). Callers hold imageMu.
func (g *Daemon) loadImageRecords(ctx context.Context) error {
	if g.imageRecordsReady {
		return nil
	}
	keys, err := g.imagesW.Keys(ctx)
	if err != nil {
		return fmt.Errorf("load image records: %w", err)
	}
	for _, k := range keys {
		data, _, ok, err := g.imagesW.Data(ctx, k)
		if err != nil {
			return fmt.Errorf("load image records: %w", err)
		}
		var rec schemas.ImageRecord
		if !ok || json.Unmarshal(data, &rec) != nil || rec.ID == "" {
			g.log.Error("Skipping image record that does not decode", "key", k)
			continue
		}
		if prev := g.imageRecords[rec.ID]; prev == nil || rec.LastUsed.After(prev.LastUsed) {
			g.imageRecords[rec.ID] = &rec
		}
	}
	// After a wipe, what is only in memory is written again below.
	g.imageRecordsReady = true
	return nil
}

// detectImages is the kubelet's detectImages: every image the runtime has
// gets a record (first seen now when new), images used by any container —
// running or not, nodelet's or not — get lastUsed = now, and records of
// images that are gone are dropped. Records are written to the images
// bucket only when they changed. It returns the images in use and the
// runtime's images by ID.
func (g *Daemon) detectImages(ctx context.Context, now time.Time) (map[string]bool, map[string]*runtimeapi.Image, error) {
	if err := g.loadImageRecords(ctx); err != nil {
		return nil, nil, err
	}
	images, err := g.img.ListImages(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("list images: %w", err)
	}
	containers, err := g.rt.ListContainers(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("list containers: %w", err)
	}
	refs := map[string]bool{}
	for _, c := range containers {
		refs[c.GetImageRef()] = true
		refs[c.GetImage().GetImage()] = true
	}
	// The sandbox image is never collected, even when no sandbox runs.
	refs[g.cfg.Runtime.SandboxImage] = true
	if st, err := g.img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: g.cfg.Runtime.SandboxImage}, false); err == nil && st.GetImage() != nil {
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
		rec := g.imageRecords[id]
		if rec == nil {
			rec = &schemas.ImageRecord{ID: id, FirstSeen: now.UTC()}
			g.imageRecords[id] = rec
		}
		rec.RepoTags = img.GetRepoTags()
		if used {
			rec.LastUsed = now.UTC()
		}
		if _, _, err := g.imagesW.Put(ctx, ImageRecordKey(id), rec); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range g.imageRecords {
		if byID[id] == nil {
			delete(g.imageRecords, id)
			if _, err := g.imagesW.Delete(ctx, ImageRecordKey(id)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return inUse, byID, errors.Join(errs...)
}

// imagesInEvictionOrder lists the images that may be removed — not in use,
// not pinned by the runtime, not the sandbox image — least recently used
// first, ties broken by first seen.
func (g *Daemon) imagesInEvictionOrder(ctx context.Context, now time.Time) ([]imageEvictionInfo, error) {
	inUse, byID, err := g.detectImages(ctx, now)
	if err != nil {
		return nil, err
	}
	var out []imageEvictionInfo
	for id, img := range byID {
		if inUse[id] || img.GetPinned() {
			continue
		}
		rec := g.imageRecords[id]
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

// garbageCollectImages is the kubelet's realImageGCManager.GarbageCollect:
// images unused for longer than imageMaximumGCAge go first; then, when the
// image filesystem is at or above imageGCHighThresholdPercent, unused images
// go least recently used first until it is at imageGCLowThresholdPercent.
func (g *Daemon) garbageCollectImages(ctx context.Context) (imageGCResult, error) {
	g.imageMu.Lock()
	defer g.imageMu.Unlock()
	res, err := g.garbageCollectImagesLocked(ctx)
	if err != nil {
		if g.prevImageGCFailed {
			// As the kubelet: only repeated failures are an event; the
			// first may be stats not yet there.
			g.log.Error("Image garbage collection failed multiple times in a row", "err", err)
			g.nodeEvent(corev1.EventTypeWarning, "ImageGCFailed", err.Error())
		} else {
			g.log.Error("Image garbage collection failed once", "err", err)
		}
		g.prevImageGCFailed = true
		return res, err
	}
	g.prevImageGCFailed = false
	return res, nil
}

func (g *Daemon) garbageCollectImagesLocked(ctx context.Context) (imageGCResult, error) {
	var res imageGCResult
	freeTime := g.clock.Now()
	images, err := g.imagesInEvictionOrder(ctx, freeTime)
	if err != nil {
		return res, err
	}
	images, err = g.freeOldImages(ctx, images, freeTime, &res)
	if err != nil {
		return res, err
	}
	ns, err := g.measure.NodeStats(ctx)
	if ns == nil || ns.ImageFs == nil {
		return res, fmt.Errorf("image filesystem stats: %w", err)
	}
	capacity, available := ns.ImageFs.Capacity, ns.ImageFs.Available
	if available > capacity {
		g.log.Info("Availability is larger than capacity", "available", available, "capacity", capacity)
		available = capacity
	}
	if capacity == 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		g.nodeEvent(corev1.EventTypeWarning, "InvalidDiskCapacity", err.Error())
		return res, err
	}
	policy := g.cfg.GC
	usagePercent := 100 - int(available*100/capacity)
	if usagePercent < policy.ImageGCHighThresholdPercent {
		return res, nil
	}
	amountToFree := capacity*int64(100-policy.ImageGCLowThresholdPercent)/100 - available
	g.log.Info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
		"usage", usagePercent, "highThreshold", policy.ImageGCHighThresholdPercent, "amountToFree", amountToFree, "lowThreshold", policy.ImageGCLowThresholdPercent)
	freed, err := g.freeSpace(ctx, amountToFree, freeTime, images, &res)
	if err != nil {
		return res, err
	}
	if freed < amountToFree {
		msg := fmt.Sprintf("Failed to garbage collect required amount of images. Attempted to free %d bytes, but only found %d bytes eligible to free.", amountToFree, freed)
		g.nodeEvent(corev1.EventTypeWarning, "FreeDiskSpaceFailed", msg)
		return res, errors.New(msg)
	}
	return res, nil
}

// deleteUnusedImages removes every unused image old enough: the eviction
// manager's reclaim under disk pressure.
func (g *Daemon) deleteUnusedImages(ctx context.Context) (imageGCResult, error) {
	g.imageMu.Lock()
	defer g.imageMu.Unlock()
	var res imageGCResult
	freeTime := g.clock.Now()
	images, err := g.imagesInEvictionOrder(ctx, freeTime)
	if err != nil {
		return res, err
	}
	_, err = g.freeSpace(ctx, math.MaxInt64, freeTime, images, &res)
	return res, err
}

// freeOldImages removes images unused for longer than imageMaximumGCAge, once
// gc itself has run that long (before, lastUsed may be older than the truth).
func (g *Daemon) freeOldImages(ctx context.Context, images []imageEvictionInfo, freeTime time.Time, res *imageGCResult) ([]imageEvictionInfo, error) {
	maxAge := g.cfg.GC.ImageMaximumGCAge
	if maxAge == 0 || freeTime.Sub(g.began) <= maxAge {
		return images, nil
	}
	var errs []error
	var remaining []imageEvictionInfo
	for _, img := range images {
		if freeTime.Sub(img.lastUsed) > maxAge {
			if err := g.freeImage(ctx, img, imageGCReasonAge, res); err != nil {
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
func (g *Daemon) freeSpace(ctx context.Context, bytesToFree int64, freeTime time.Time, images []imageEvictionInfo, res *imageGCResult) (int64, error) {
	var errs []error
	var freed int64
	for _, img := range images {
		if ctx.Err() != nil {
			break
		}
		if freeTime.Sub(img.first) < g.cfg.GC.ImageMinimumGCAge {
			continue
		}
		if err := g.freeImage(ctx, img, imageGCReasonSpace, res); err != nil {
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

func (g *Daemon) freeImage(ctx context.Context, img imageEvictionInfo, reason string, res *imageGCResult) error {
	g.log.Info("Removing image to free bytes", "imageID", img.id, "repoTags", img.tags, "size", img.size, "lastUsed", img.lastUsed, "reason", reason)
	if err := g.img.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.id}); err != nil && !crierrors.IsNotFound(err) {
		return fmt.Errorf("remove image %s: %w", img.id, err)
	}
	delete(g.imageRecords, img.id)
	if _, err := g.imagesW.Delete(ctx, ImageRecordKey(img.id)); err != nil {
		g.log.Error("Failed to delete image record", "imageID", img.id, "err", err)
	}
	removedTotal.WithLabelValues(objImage).Inc()
	reclaimedBytes.WithLabelValues(objImage).Add(float64(img.size))
	imagesCollected.WithLabelValues(reason).Inc()
	res.Removed = append(res.Removed, img.id)
	res.Freed += img.size
	return nil
}
