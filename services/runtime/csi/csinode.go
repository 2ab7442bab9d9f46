package csi

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// csiNodeWriter keeps the node's CSINode object, as the kubelet's
// nodeinfomanager: one entry per registered driver with its node ID,
// topology keys and attach limit; owned by the Node.
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

// install puts (or replaces) the driver's entry.
func (w *csiNodeWriter) install(ctx context.Context, d *Driver) error {
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

// uninstall removes the driver's entry.
func (w *csiNodeWriter) uninstall(ctx context.Context, name string) error {
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
