package testenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BootstrapKubeconfig prepares TLS bootstrap as `kubeadm init` and `kubeadm
// token create` do, and writes a bootstrap kubeconfig for a node to path:
//
//   - a bootstrap token, Secret bootstrap-token-<id> in kube-system
//     (usage-bootstrap-authentication, expiring in an hour); kube-apiserver
//     runs with --enable-bootstrap-token-auth, so it authenticates as
//     system:bootstrap:<id> in group system:bootstrappers;
//   - the ClusterRoleBindings that let the csrapproving controller of
//     kube-controller-manager approve node client certificates: the group
//     system:bootstrappers may create CSRs (system:node-bootstrapper) and
//     have its node client CSRs approved (…:certificatesigningrequests:nodeclient),
//     and system:nodes its renewals (…:selfnodeclient). They are made once
//     and kept.
//
// It returns the token (<id>.<secret>).
func (cp *ControlPlane) BootstrapKubeconfig(ctx context.Context, path string) (string, error) {
	c, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return "", err
	}
	id, secret := randToken(6), randToken(16)
	_, err = c.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"expiration":                     time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
			"description":                    "nodelet testenv bootstrap token",
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("bootstrap token secret: %w", err)
	}
	for name, b := range map[string]struct{ role, group string }{
		"kubeadm:kubelet-bootstrap":                     {"system:node-bootstrapper", "system:bootstrappers"},
		"kubeadm:node-autoapprove-bootstrap":            {"system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers"},
		"kubeadm:node-autoapprove-certificate-rotation": {"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	} {
		_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.group}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("ClusterRoleBinding %s: %w", name, err)
		}
	}
	token := id + "." + secret
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.CAData}
	cfg.AuthInfos["tls-bootstrap-token-user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["tls-bootstrap"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "tls-bootstrap-token-user"}
	cfg.CurrentContext = "tls-bootstrap"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return token, nil
}

// randToken is n characters of [a-z0-9], the bootstrap token alphabet.
func randToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(err)
		}
		b[i] = alphabet[v.Int64()]
	}
	return string(b)
}
