package kubeclient

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

// This file mirrors the kubelet's pkg/kubelet/certificate/bootstrap
// (bootstrap.go of v1.37): the same files, names and steps, with slog.

// tmpPrivateKeyFile caches the private key until the CSR succeeds.
const tmpPrivateKeyFile = "kubelet-client.key.tmp"

// loadClientConfig is the kubelet's bootstrap.LoadClientConfig: the config
// to request certificates with (certConfig) and the config of the node's
// identity (userConfig). Without bootstrapPath both are kubeconfigPath's.
// With it and a still-valid kubeconfigPath, both are kubeconfigPath's;
// otherwise kubeconfigPath is (re)written pointing at the certificate
// store's current pair, and certConfig is the bootstrap kubeconfig's.
func loadClientConfig(log *slog.Logger, kubeconfigPath, bootstrapPath, certDir string) (certConfig, userConfig *rest.Config, err error) {
	if len(bootstrapPath) == 0 {
		clientConfig, err := loadRESTClientConfig(kubeconfigPath)
		if err != nil {
			return nil, nil, fmt.Errorf("unable to load kubeconfig: %v", err)
		}
		log.Debug("No bootstrapping requested, will use kubeconfig")
		return clientConfig, rest.CopyConfig(clientConfig), nil
	}
	store, err := certificate.NewFileStore(clientPairPrefix, certDir, certDir, "", "")
	if err != nil {
		return nil, nil, fmt.Errorf("unable to build bootstrap cert store")
	}
	ok, err := isClientConfigStillValid(log, kubeconfigPath)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		clientConfig, err := loadRESTClientConfig(kubeconfigPath)
		if err != nil {
			return nil, nil, fmt.Errorf("unable to load kubeconfig: %v", err)
		}
		log.Debug("Current kubeconfig file contents are still valid, no bootstrap necessary")
		return clientConfig, rest.CopyConfig(clientConfig), nil
	}
	bootstrapClientConfig, err := loadRESTClientConfig(bootstrapPath)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to load bootstrap kubeconfig: %v", err)
	}
	clientConfig := rest.AnonymousClientConfig(bootstrapClientConfig)
	pemPath := store.CurrentPath()
	clientConfig.KeyFile = pemPath
	clientConfig.CertFile = pemPath
	if err := writeKubeconfigFromBootstrapping(clientConfig, kubeconfigPath, pemPath); err != nil {
		return nil, nil, err
	}
	log.Info("Using the bootstrap credentials to request a client certificate; node.kubeconfig points at the certificate directory",
		"kubeconfig", kubeconfigPath, "certificate", pemPath)
	return bootstrapClientConfig, clientConfig, nil
}

// loadClientCert is the kubelet's bootstrap.LoadClientCert: when
// kubeconfigPath is missing or its certificate expired, it requests a
// client certificate with the bootstrap kubeconfig, waits until it is
// issued, stores it in certDir and writes kubeconfigPath pointing at it.
func loadClientCert(ctx context.Context, log *slog.Logger, kubeconfigPath, bootstrapPath, certDir, nodeName string) error {
	ok, err := isClientConfigStillValid(log, kubeconfigPath)
	if err != nil {
		return err
	}
	if ok {
		log.Debug("Kubeconfig exists and is valid, skipping bootstrap", "path", kubeconfigPath)
		return nil
	}
	log.Info("Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file", "bootstrapKubeconfig", bootstrapPath)
	bootstrapClientConfig, err := loadRESTClientConfig(bootstrapPath)
	if err != nil {
		return fmt.Errorf("unable to load bootstrap kubeconfig: %v", err)
	}
	bootstrapClient, err := kubernetes.NewForConfig(bootstrapClientConfig)
	if err != nil {
		return fmt.Errorf("unable to create certificates signing request client: %v", err)
	}
	store, err := newClientStore(certDir, "", "")
	if err != nil {
		return fmt.Errorf("unable to build bootstrap cert store")
	}
	var keyData []byte
	if cert, err := store.Current(); err == nil && cert.PrivateKey != nil {
		if keyData, err = keyutil.MarshalPrivateKeyToPEM(cert.PrivateKey); err != nil {
			keyData = nil
		}
	}
	// The key waits in a file of its own until the CSR succeeds: the
	// store's current path is a symlink the store manages.
	privKeyPath := filepath.Join(certDir, tmpPrivateKeyFile)
	if !verifyKeyData(keyData) {
		log.Debug("No valid private key and/or certificate found, reusing existing private key or creating a new one")
		// Always LoadOrGenerateKeyFile, so that the key is reused on the
		// next start if the CSR fails.
		if keyData, _, err = keyutil.LoadOrGenerateKeyFile(privKeyPath); err != nil {
			return err
		}
	}
	if err := waitForServer(ctx, log, *bootstrapClientConfig, time.Minute); err != nil {
		log.Info("Error waiting for apiserver to come up", "err", err)
	}
	certData, err := requestNodeCertificate(ctx, log, bootstrapClient, keyData, nodeName)
	if err != nil {
		return err
	}
	if _, err := store.Update(certData, keyData); err != nil {
		return err
	}
	if err := os.Remove(privKeyPath); err != nil && !os.IsNotExist(err) {
		log.Debug("Failed cleaning up private key file", "path", privKeyPath, "err", err)
	}
	return writeKubeconfigFromBootstrapping(bootstrapClientConfig, kubeconfigPath, store.CurrentPath())
}

// writeKubeconfigFromBootstrapping writes the node's kubeconfig: the
// bootstrap kubeconfig's cluster, the client certificate and key at pemPath.
func writeKubeconfigFromBootstrapping(bootstrapClientConfig *rest.Config, kubeconfigPath, pemPath string) error {
	caFile, caData := bootstrapClientConfig.CAFile, []byte{}
	if len(caFile) == 0 {
		caData = bootstrapClientConfig.CAData
	}
	kubeconfigData := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server:                   bootstrapClientConfig.Host,
			InsecureSkipTLSVerify:    bootstrapClientConfig.Insecure,
			CertificateAuthority:     caFile,
			CertificateAuthorityData: caData,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {
			ClientCertificate: pemPath,
			ClientKey:         pemPath,
		}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster:   "default-cluster",
			AuthInfo:  "default-auth",
			Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfigPath), 0o755); err != nil {
		return err
	}
	// clientcmd.WriteToFile writes 0600 and in place: the other daemons
	// poll the file and may read it half-written, so write a sibling and
	// rename it over.
	tmp := kubeconfigPath + ".tmp"
	if err := clientcmd.WriteToFile(kubeconfigData, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, kubeconfigPath)
}

func loadRESTClientConfig(kubeconfig string) (*rest.Config, error) {
	loader := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
	loadedConfig, err := loader.Load()
	if err != nil {
		return nil, err
	}
	return clientcmd.NewNonInteractiveClientConfig(*loadedConfig, loadedConfig.CurrentContext,
		&clientcmd.ConfigOverrides{}, loader).ClientConfig()
}

// isClientConfigStillValid reports whether kubeconfigPath exists and its
// client certificate loads and has not expired; an error stops bootstrapping.
func isClientConfigStillValid(log *slog.Logger, kubeconfigPath string) (bool, error) {
	_, err := os.Stat(kubeconfigPath)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("error reading existing bootstrap kubeconfig %s: %v", kubeconfigPath, err)
	}
	bootstrapClientConfig, err := loadRESTClientConfig(kubeconfigPath)
	if err != nil {
		log.Info("Unable to read existing bootstrap client config", "path", kubeconfigPath, "err", err)
		return false, nil
	}
	transportConfig, err := bootstrapClientConfig.TransportConfig()
	if err != nil {
		log.Info("Unable to load transport configuration from existing bootstrap client config", "path", kubeconfigPath, "err", err)
		return false, nil
	}
	// Populates transportConfig's data fields from its files.
	if _, err := transport.TLSConfigFor(transportConfig); err != nil {
		log.Info("Unable to load TLS configuration from existing bootstrap client config", "path", kubeconfigPath, "err", err)
		return false, nil
	}
	certs, err := certutil.ParseCertsPEM(transportConfig.TLS.CertData)
	if err != nil || len(certs) == 0 {
		log.Info("Unable to load TLS certificates from existing bootstrap client config", "path", kubeconfigPath, "err", err)
		return false, nil
	}
	now := time.Now()
	for _, cert := range certs {
		if now.After(cert.NotAfter) {
			log.Info("Part of the existing bootstrap client certificate is expired", "path", kubeconfigPath, "notAfter", cert.NotAfter)
			return false, nil
		}
	}
	return true, nil
}

func verifyKeyData(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	_, err := keyutil.ParsePrivateKeyPEM(data)
	return err == nil
}

func waitForServer(ctx context.Context, log *slog.Logger, cfg rest.Config, deadline time.Duration) error {
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	cfg.Timeout = time.Second
	cli, err := rest.UnversionedRESTClientFor(&cfg)
	if err != nil {
		return fmt.Errorf("couldn't create client: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var connected bool
	wait.JitterUntil(func() {
		if _, err := cli.Get().AbsPath("/healthz").Do(ctx).Raw(); err != nil {
			log.Info("Failed to connect to apiserver", "err", err)
			return
		}
		cancel()
		connected = true
	}, 2*time.Second, 0.2, true, ctx.Done())
	if !connected {
		return errors.New("timed out waiting to connect to apiserver")
	}
	return nil
}

// requestNodeCertificate creates the node's client CSR (CN
// system:node:<name>, O system:nodes, signer
// kubernetes.io/kube-apiserver-client-kubelet) and waits, up to an hour, for
// the issued certificate.
func requestNodeCertificate(ctx context.Context, log *slog.Logger, client kubernetes.Interface, privateKeyData []byte, nodeName string) ([]byte, error) {
	subject := &pkix.Name{Organization: []string{"system:nodes"}, CommonName: "system:node:" + nodeName}
	privateKey, err := keyutil.ParsePrivateKeyPEM(privateKeyData)
	if err != nil {
		return nil, fmt.Errorf("invalid private key for certificate request: %v", err)
	}
	csrData, err := certutil.MakeCSR(privateKey, subject, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("unable to generate certificate request: %v", err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if _, ok := privateKey.(*rsa.PrivateKey); ok {
		usages = append(usages, certificatesv1.UsageKeyEncipherment)
	}
	signer, ok := privateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key does not implement crypto.Signer")
	}
	name, err := digestedName(signer.Public(), subject, usages)
	if err != nil {
		return nil, err
	}
	reqName, reqUID, err := csr.RequestCertificate(client, csrData, name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, privateKey)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3600*time.Second)
	defer cancel()
	log.Info("Waiting for client certificate to be issued", "csr", reqName)
	return csr.WaitForCertificate(ctx, client, reqName, reqUID)
}

// digestedName names the CSR after its public key, subject and usages, so
// that a restart asks again under the same name (the kubelet's).
func digestedName(publicKey any, subject *pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	hash := sha512.New512_256()
	const delimiter = '|'
	encode := base64.RawURLEncoding.EncodeToString
	write := func(data []byte) {
		hash.Write([]byte(encode(data)))
		hash.Write([]byte{delimiter})
	}
	publicKeyData, err := x509.MarshalPKIXPublicKey(publicKey)
	if err != nil {
		return "", err
	}
	write(publicKeyData)
	write([]byte(subject.CommonName))
	for _, v := range subject.Organization {
		write([]byte(v))
	}
	for _, v := range usages {
		write([]byte(v))
	}
	return fmt.Sprintf("node-csr-%s", encode(hash.Sum(nil))), nil
}
