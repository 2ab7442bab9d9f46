package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// csiNodeWriter keeps the node's CSINode object, as the kubelet's
// nodeinfomanager: one entry per registered driver with its node ID,
// topology keys and attach limit; owned by the Node. The Node gets the
// driver's node ID annotation and topology labels.
type csiNodeWriter struct {
	client   kubernetes.Interface
	nodeName string
}

// initialize creates the CSINode once the Node exists.
func (w *csiNodeWriter) initialize(ctx context.Context, log *slog.Logger) {
	for {
		err := w.update(ctx, func(*storagev1.CSINode) bool { return false })
		if err == nil {
			return
		}
		log.Debug("CSINode not initialized yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// annotationNodeID is the kubelet's csi.volume.kubernetes.io/nodeid: a JSON
// map of driver name to its node ID on the Node.
const annotationNodeID = "csi.volume.kubernetes.io/nodeid"

// updateNode is the kubelet's installDriverToNode / uninstall: the
// driver's node ID in the Node's nodeid annotation and its topology
// segments as Node labels (a label that exists with another value is an
// error). nodeID "" removes the driver from the annotation.
func (w *csiNodeWriter) updateNode(ctx context.Context, driver, nodeID string, topology map[string]string) error {
	node, err := w.client.CoreV1().Nodes().Get(ctx, w.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ids := map[string]string{}
	if raw := node.Annotations[annotationNodeID]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &ids); err != nil {
			return fmt.Errorf("node annotation %s: %w", annotationNodeID, err)
		}
	}
	labels := map[string]string{}
	for k, v := range topology {
		if old, ok := node.Labels[k]; ok && old != v {
			return fmt.Errorf("detected topology value collision: driver reported %q:%q but existing label is %q:%q", k, v, k, old)
		}
		if _, ok := node.Labels[k]; !ok {
			labels[k] = v
		}
	}
	if nodeID == "" {
		if _, ok := ids[driver]; !ok {
			return nil
		}
		delete(ids, driver)
	} else {
		if ids[driver] == nodeID && len(labels) == 0 {
			return nil
		}
		ids[driver] = nodeID
	}
	meta := map[string]any{"labels": labels}
	if len(ids) == 0 {
		meta["annotations"] = map[string]any{annotationNodeID: nil}
	} else {
		b, _ := json.Marshal(ids)
		meta["annotations"] = map[string]any{annotationNodeID: string(b)}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = w.client.CoreV1().Nodes().Patch(ctx, w.nodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// install puts (or replaces) the driver's entry.
func (w *csiNodeWriter) install(ctx context.Context, d *Driver) error {
	if err := w.updateNode(ctx, d.Name, d.NodeID, d.Topology); err != nil {
		return fmt.Errorf("error updating Node object with CSI driver node info: %w", err)
	}
	keys := make([]string, 0, len(d.Topology))
	for k := range d.Topology {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entry := storagev1.CSINodeDriver{Name: d.Name, NodeID: d.NodeID, TopologyKeys: keys}
	if d.MaxVolumes > 0 {
		n := int32(d.MaxVolumes)
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: &n}
	}
	return w.update(ctx, func(n *storagev1.CSINode) bool {
		for i := range n.Spec.Drivers {
			if n.Spec.Drivers[i].Name == d.Name {
				n.Spec.Drivers[i] = entry
				return true
			}
		}
		n.Spec.Drivers = append(n.Spec.Drivers, entry)
		return true
	})
}

// uninstall removes the driver's entry (and its node ID from the Node;
// topology labels stay, as with the kubelet).
func (w *csiNodeWriter) uninstall(ctx context.Context, name string) error {
	if err := w.updateNode(ctx, name, "", nil); err != nil {
		return err
	}
	return w.update(ctx, func(n *storagev1.CSINode) bool {
		for i := range n.Spec.Drivers {
			if n.Spec.Drivers[i].Name == name {
				n.Spec.Drivers = append(n.Spec.Drivers[:i], n.Spec.Drivers[i+1:]...)
				return true
			}
		}
		return false
	})
}

// update reads the CSINode (creating it, owned by the Node, when missing),
// applies change and writes it when change says it changed anything.
func (w *csiNodeWriter) update(ctx context.Context, change func(*storagev1.CSINode) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		api := w.client.StorageV1().CSINodes()
		n, err := api.Get(ctx, w.nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err := w.client.CoreV1().Nodes().Get(ctx, w.nodeName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get Node %s for its CSINode: %w", w.nodeName, err)
			}
			n = &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{
				Name: w.nodeName,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				}},
			}}
			change(n)
			_, err = api.Create(ctx, n, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(storagev1.Resource("csinodes"), w.nodeName, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if !change(n) {
			return nil
		}
		_, err = api.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
