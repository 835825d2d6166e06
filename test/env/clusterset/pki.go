package clusterset

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"vksfleet.dev/fleet/test/env/dataplane"
)

// configureInCluster makes the API server of a member with kubelet nodes serve pods as a real cluster's does:
//   - a serving certificate that in-cluster clients accept. envtest's own names only localhost and the listen
//     address, while a pod reaches the API server at the kubernetes Service's ClusterIP, or by the names
//     kubernetes.default.svc...; envtest generates no certificate where it finds one (apiserver.crt in CertDir),
//     so this one is written there, with the service-account signing key envtest writes along with its own;
//   - the ServiceAccount admission plugin, which envtest disables: it gives pods their ServiceAccount token.
//
// It returns the serving CA's file, which kube-controller-manager publishes as kube-root-ca.crt in every
// namespace (pods verify the API server with it).
func (c *Cluster) configureInCluster(api *envtest.APIServer) (string, error) {
	spec := certSpec{cn: "kube-apiserver", server: true,
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips: []netip.Addr{netip.IPv6Loopback(), netip.MustParseAddr("127.0.0.1"), dataplane.HostV4}}
	for _, p := range c.ServiceCIDRs {
		// The kubernetes Service always gets the first address of each range.
		spec.ips = append(spec.ips, p.Masked().Addr().Next())
	}
	ca, err := writeServingPKI(api.CertDir, spec)
	if err != nil {
		return "", err
	}
	api.SecureServing.CA = certPEM(ca)
	// envtest's default disables ServiceAccount; an empty list disables nothing.
	api.Configure().Set("disable-admission-plugins", "")
	return filepath.Join(api.CertDir, servingCAFile), nil
}

// The files writeServingPKI writes; the last four are the names envtest looks for in an API server's CertDir.
const (
	servingCAFile   = "serving-ca.crt"
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	saCertFile      = "sa-signer.crt"
	saKeyFile       = "sa-signer.key"
)

// writeServingPKI writes into dir what an API server serves with: a new serving CA, the certificate it signs for
// spec, and a service-account signing key. It returns the CA.
func writeServingPKI(dir string, spec certSpec) (*x509.Certificate, error) {
	ca, caKey, err := newCA("kube-apiserver-serving-ca")
	if err != nil {
		return nil, err
	}
	cert, key, err := newCert(spec, ca, caKey)
	if err != nil {
		return nil, err
	}
	saCA, saKey, err := newCA("service-account-signer")
	if err != nil {
		return nil, err
	}
	for name, crt := range map[string]*x509.Certificate{servingCAFile: ca, servingCertFile: cert, saCertFile: saCA} {
		if err := writeCert(filepath.Join(dir, name), crt); err != nil {
			return nil, err
		}
	}
	for name, k := range map[string]*ecdsa.PrivateKey{servingKeyFile: key, saKeyFile: saKey} {
		if err := writeKey(filepath.Join(dir, name), k); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// certSpec is what a certificate says: its subject, and for a server, its names.
type certSpec struct {
	cn     string
	orgs   []string
	server bool // a serving certificate (else a client's)
	dns    []string
	ips    []netip.Addr
}

// newCA makes a self-signed ECDSA P-256 CA.
func newCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	return sign(certSpec{cn: cn}, true, nil, nil)
}

// newCert makes an ECDSA P-256 certificate signed by the CA parent.
func newCert(spec certSpec, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	return sign(spec, false, parent, parentKey)
}

// sign makes a key and its certificate, signed by parent, or by itself for a CA without a parent.
func sign(spec certSpec, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     spec.dns,
	}
	for _, ip := range spec.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	if spec.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature, nil
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// writeCert writes a certificate as PEM.
func writeCert(path string, cert *x509.Certificate) error {
	return os.WriteFile(path, certPEM(cert), 0o600)
}

// writeKey writes an ECDSA private key as PEM.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	b, err := keyPEM(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// certPEM encodes a certificate as PEM.
func certPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// keyPEM encodes an ECDSA private key as PEM.
func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
