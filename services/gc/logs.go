package gc

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/cri"
)

// The kubelet's container log manager (pkg/kubelet/logs): the current log
// <path> is renamed to <path>.<timestamp> and the runtime told to reopen it
// (CRI ReopenContainerLog); the newest rotated file stays uncompressed (the
// container may still be writing its last lines into it, and a log shipper
// may be reading it), older ones are gzipped to <path>.<timestamp>.gz, and
// at most containerLogMaxFiles files — the current one included — remain.
const (
	logTimestampFormat = "20060102-150405"
	logCompressSuffix  = ".gz"
	logTmpSuffix       = ".tmp"
)

// containerLogManager is the kubelet's container log manager
// (pkg/kubelet/logs/container_log_manager.go containerLogManager): it
// rotates the running containers' logs at containerLogMaxSize, keeping
// containerLogMaxFiles files.
type containerLogManager struct {
	maxSize  int64 // gc.containerLogMaxSize in bytes
	maxFiles int   // gc.containerLogMaxFiles, at least 2
	log      *slog.Logger
	clock    clock.Clock
	rt       logRuntime

	mu sync.Mutex
}

// logRuntime is the part of CRI log rotation uses.
type logRuntime interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error)
	ReopenContainerLog(ctx context.Context, containerID string) error
}

var _ logRuntime = (internalapi.RuntimeService)(nil)

// rotateLogs checks every running managed container's log and rotates the
// ones at or above containerLogMaxSize.
func (m *containerLogManager) rotateLogs(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	containers, err := m.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: cri.ManagedSelector(),
	})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Only running containers: a dead one writes nothing more.
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		id := c.GetId()
		resp, err := m.rt.ContainerStatus(ctx, id, false)
		if err != nil {
			m.log.Error("Failed to get container status", "containerID", id, "err", err)
			continue
		}
		path := resp.GetStatus().GetLogPath()
		if path == "" {
			continue
		}
		info, err := os.Stat(path)
		if err != nil {
			if !os.IsNotExist(err) {
				m.log.Error("Failed to stat container log", "path", path, "err", err)
				continue
			}
			// A rotation cut short (reopen failed, or gc died between the
			// rename and the reopen) lost the current file: reopen it.
			if err := m.rt.ReopenContainerLog(ctx, id); err != nil {
				m.log.Error("Container log doesn't exist, reopen container log failed", "containerID", id, "path", path, "err", err)
				continue
			}
			if info, err = os.Stat(path); err != nil {
				m.log.Error("Failed to stat container log after reopen", "path", path, "err", err)
				continue
			}
		}
		if info.Size() < m.maxSize {
			continue
		}
		if err := m.rotateLog(ctx, id, path); err != nil {
			m.log.Error("Failed to rotate log for container", "path", path, "containerID", id, "err", err)
			continue
		}
	}
	return nil
}

func (m *containerLogManager) rotateLog(ctx context.Context, id, log string) error {
	logs, err := filepath.Glob(log + ".*")
	if err != nil {
		return fmt.Errorf("failed to list all log files with pattern %q: %w", log+".*", err)
	}
	if logs, err = m.cleanupUnusedLogs(logs); err != nil {
		return fmt.Errorf("failed to cleanup logs: %w", err)
	}
	if logs, err = m.removeExcessLogs(logs); err != nil {
		return fmt.Errorf("failed to remove excess logs: %w", err)
	}
	for _, l := range logs {
		if strings.HasSuffix(l, logCompressSuffix) {
			continue
		}
		if err := compressLog(l); err != nil {
			return fmt.Errorf("failed to compress log %q: %w", l, err)
		}
	}
	return m.rotateLatestLog(ctx, id, log)
}

// cleanupUnusedLogs removes what an earlier rotation cut short left:
// temporary files, and uncompressed files whose .gz is complete.
func (m *containerLogManager) cleanupUnusedLogs(logs []string) ([]string, error) {
	inuse, unused := filterUnusedLogs(logs)
	for _, l := range unused {
		if err := os.Remove(l); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("failed to remove unused log %q: %w", l, err)
		}
		removedTotal.WithLabelValues(objLogFile).Inc()
	}
	return inuse, nil
}

func filterUnusedLogs(logs []string) (inuse, unused []string) {
	for _, l := range logs {
		if isLogInUse(l, logs) {
			inuse = append(inuse, l)
		} else {
			unused = append(unused, l)
		}
	}
	return inuse, unused
}

func isLogInUse(l string, logs []string) bool {
	if strings.HasSuffix(l, logTmpSuffix) {
		return false
	}
	if strings.HasSuffix(l, logCompressSuffix) {
		return true
	}
	for _, other := range logs {
		if l+logCompressSuffix == other {
			return false
		}
	}
	return true
}

// removeExcessLogs keeps the newest containerLogMaxFiles-2 rotated files:
// with the file about to be rotated and the new current one, that makes
// containerLogMaxFiles. The oldest go first, so a reader following the
// newest files is not disturbed.
func (m *containerLogManager) removeExcessLogs(logs []string) ([]string, error) {
	sort.Strings(logs)
	maxRotated := max(m.maxFiles-2, 0)
	i := 0
	for ; i < len(logs)-maxRotated; i++ {
		size := fileSize(logs[i])
		if err := os.Remove(logs[i]); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("failed to remove old log %q: %w", logs[i], err)
		}
		removedTotal.WithLabelValues(objLogFile).Inc()
		reclaimedBytes.WithLabelValues(objContainerLog).Add(float64(size))
	}
	return logs[i:], nil
}

// compressLog gzips log to log.gz through a temporary file, then removes log.
func compressLog(log string) error {
	r, err := os.Open(log)
	if err != nil {
		return fmt.Errorf("failed to open log %q: %w", log, err)
	}
	defer r.Close()
	tmp := log + logTmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("failed to create temporary log %q: %w", tmp, err)
	}
	defer func() { _ = os.Remove(tmp) }()
	defer f.Close()
	w := gzip.NewWriter(f)
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("failed to compress %q to %q: %w", log, tmp, err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, log+logCompressSuffix); err != nil {
		return fmt.Errorf("failed to rename %q to %q: %w", tmp, log+logCompressSuffix, err)
	}
	before := fileSize(log)
	if err := os.Remove(log); err != nil {
		return fmt.Errorf("failed to remove log %q after compress: %w", log, err)
	}
	reclaimedBytes.WithLabelValues(objContainerLog).Add(float64(max(before-fileSize(log+logCompressSuffix), 0)))
	return nil
}

// rotateLatestLog renames the current log aside and has the runtime reopen
// it; if the reopen fails the rename is undone so the next pass can retry.
func (m *containerLogManager) rotateLatestLog(ctx context.Context, id, log string) error {
	rotated := log + "." + m.clock.Now().Format(logTimestampFormat)
	if _, err := os.Stat(rotated); err == nil {
		// Rotated twice within a second: renaming would overwrite the
		// earlier file. The next pass rotates under a new name.
		return fmt.Errorf("rotated log %q already exists", rotated)
	}
	if err := os.Rename(log, rotated); err != nil {
		return fmt.Errorf("failed to rotate log %q to %q: %w", log, rotated, err)
	}
	if err := m.rt.ReopenContainerLog(ctx, id); err != nil {
		if renameErr := os.Rename(rotated, log); renameErr != nil {
			m.log.Error("Failed to rename rotated log", "rotatedLog", rotated, "newLog", log, "containerID", id, "err", renameErr)
		}
		return fmt.Errorf("failed to reopen container log %q: %w", id, err)
	}
	logRotations.Inc()
	m.log.Debug("Rotated container log", "containerID", id, "path", log, "rotatedLog", rotated)
	return nil
}
