package devices

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"

	"github.com/nodelet/nodelet/schemas"
)

// DRACheckpointFile is the DRA manager's checkpoint, named as the
// kubelet's (cm/dra draManagerStateFileName). The kubelet keeps it in its
// root directory; nodelet keeps it beside CheckpointFile in
// <node.rootDir>/device-plugins, the one directory of the root that
// nodelet-devices may write under systemd (the root holds the pods'
// volumes: a daemon that only needs a state file gets no write access to
// them). Every claims.<uid> record reaches it before the bucket, and it is
// read back at start, so a wipe of the bus's store neither makes a claim
// prepared again nor forgets one to unprepare.
const DRACheckpointFile = "dra_manager_state"

// The kubelet's envelope (cm/dra/state checkpoint.go): Data is the JSON
// of the state, Checksum its CRC-32 (IEEE). The state is nodelet's, one
// record per pod (schemas.PodClaims), so the kind says nodelet's.
const (
	draCheckpointKind       = "DRACheckpoint"
	draCheckpointAPIVersion = "checkpoint.dra.nodelet.io/v1"
)

type draCheckpoint struct {
	Data     string `json:"Data"`
	Checksum uint32 `json:"Checksum"`
}

type draCheckpointData struct {
	Kind       string               `json:"kind"`
	APIVersion string               `json:"apiVersion"`
	PodClaims  []*schemas.PodClaims `json:"PodClaims"`
}

// encodeDRACheckpoint is the file's bytes for recs (sorted by pod UID, so
// that the same state gives the same bytes).
func encodeDRACheckpoint(recs []*schemas.PodClaims) ([]byte, error) {
	recs = append([]*schemas.PodClaims{}, recs...)
	sort.Slice(recs, func(i, j int) bool { return recs[i].UID < recs[j].UID })
	data, err := json.Marshal(draCheckpointData{Kind: draCheckpointKind, APIVersion: draCheckpointAPIVersion, PodClaims: recs})
	if err != nil {
		return nil, err
	}
	return json.Marshal(draCheckpoint{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
}

// readDRACheckpoint is the kubelet's newClaimInfoCache reading its
// checkpoint: the records, verified by the checksum (its
// CorruptCheckpointError), errNoCheckpoint when there is no file.
func readDRACheckpoint(dir string) ([]*schemas.PodClaims, error) {
	b, err := os.ReadFile(filepath.Join(dir, DRACheckpointFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoCheckpoint
	}
	if err != nil {
		return nil, err
	}
	var c draCheckpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("checkpoint is corrupted: %w", err)
	}
	if sum := crc32.ChecksumIEEE([]byte(c.Data)); sum != c.Checksum {
		return nil, fmt.Errorf("checkpoint is corrupted: checksum mismatch (%d, want %d)", c.Checksum, sum)
	}
	var d draCheckpointData
	if err := json.Unmarshal([]byte(c.Data), &d); err != nil {
		return nil, fmt.Errorf("checkpoint is corrupted: %w", err)
	}
	if d.Kind != draCheckpointKind || d.APIVersion != draCheckpointAPIVersion {
		return nil, fmt.Errorf("checkpoint is of kind %q %q, want %q %q", d.APIVersion, d.Kind, draCheckpointAPIVersion, draCheckpointKind)
	}
	var out []*schemas.PodClaims
	for _, r := range d.PodClaims {
		if r != nil && r.UID != "" {
			out = append(out, r)
		}
	}
	return out, nil
}
