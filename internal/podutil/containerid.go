package podutil

import "strings"

// RawContainerID strips the runtime scheme of a status container ID
// ("containerd://<id>" → "<id>"), as the kubelet's ParseContainerID;
// an ID without one is returned as it is.
func RawContainerID(id string) string {
	if _, raw, ok := strings.Cut(id, "://"); ok {
		return raw
	}
	return id
}
