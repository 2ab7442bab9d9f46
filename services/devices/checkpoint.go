package devices

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"

	"github.com/nodelet/nodelet/schemas"
)

// CheckpointFile is nodelet-devices' checkpoint in the device plugin
// directory: the kubelet keeps kubelet_internal_checkpoint there
// (devicemanager kubeletDeviceManagerCheckpoint), beside the sockets, where
// CleanupPluginDirectory leaves it. It outlives the bus's store: a node
// whose store was wiped (or lost) gets every allocation back from it, so
// no running pod's devices are handed to another and no Allocate is called
// twice.
const CheckpointFile = "nodelet_internal_checkpoint"

// checkpoint is the file's content, in the kubelet's terms
// (devicemanager/checkpoint.Data): the pods' devices and the registered
// resources, with a checksum of both.
type checkpoint struct {
	Data     checkpointData `json:"Data"`
	Checksum uint64         `json:"Checksum"`
}

type checkpointData struct {
	PodDeviceEntries  []*schemas.PodDevices    `json:"PodDeviceEntries"`
	RegisteredDevices *schemas.DeviceResources `json:"RegisteredDevices"`
}

func checksum(d checkpointData) (uint64, []byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return 0, nil, err
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64(), b, nil
}

// encodeCheckpoint is the file's bytes for res and pods (sorted by UID, so
// that the same state gives the same bytes).
func encodeCheckpoint(res *schemas.DeviceResources, pods []*schemas.PodDevices) ([]byte, error) {
	d := checkpointData{PodDeviceEntries: pods, RegisteredDevices: res}
	if d.PodDeviceEntries == nil {
		d.PodDeviceEntries = []*schemas.PodDevices{}
	}
	sum, _, err := checksum(d)
	if err != nil {
		return nil, err
	}
	return json.Marshal(checkpoint{Data: d, Checksum: sum})
}

// errNoCheckpoint: no file (a node that never had one).
var errNoCheckpoint = errors.New("no checkpoint")

// readCheckpoint is the kubelet's readCheckpoint: the file, verified by
// its checksum (checkpointmanager's corrupt-checkpoint error).
func readCheckpoint(dir string) (*schemas.DeviceResources, []*schemas.PodDevices, error) {
	b, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, errNoCheckpoint
	}
	if err != nil {
		return nil, nil, err
	}
	var c checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, fmt.Errorf("checkpoint is corrupted: %w", err)
	}
	sum, _, err := checksum(c.Data)
	if err != nil || sum != c.Checksum {
		return nil, nil, errors.New("checkpoint is corrupted: checksum mismatch")
	}
	var pods []*schemas.PodDevices
	for _, p := range c.Data.PodDeviceEntries {
		if p != nil && p.UID != "" {
			pods = append(pods, p)
		}
	}
	return c.Data.RegisteredDevices, pods, nil
}

// writeFileAtomic writes data to path through a file beside it, synced and
// renamed, as the kubelet's checkpoint store (utilstore.FileStore) does: a
// crash leaves the old checkpoint or the new one, never half of one.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
