package install

import (
	"errors"
	"fmt"
	"net/url"
	"os"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// BrokerInfo is what `kubectl mcs broker init` writes and join, unjoin and rotate read: where the broker is, how
// to trust it, the clusterset's name, and the joiner's token (see build/deploy/broker/joiner.yaml).
type BrokerInfo struct {
	// Server is the broker API server's URL as members reach it.
	Server string `json:"server"`
	// CertificateAuthorityData is the PEM bundle members trust the broker's serving certificate with.
	CertificateAuthorityData []byte `json:"certificateAuthorityData,omitempty"`
	// ClusterSet is the clusterset's name, which every member's clusterset.k8s.io ClusterProperty holds.
	ClusterSet string `json:"clusterSet"`
	// Token is the joiner ServiceAccount's token.
	Token string `json:"token"`
}

// ReadBrokerInfo reads and checks a broker-info file.
func ReadBrokerInfo(path string) (BrokerInfo, error) {
	var info BrokerInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return info, fmt.Errorf("reading the broker-info file: %w (write one with `kubectl mcs broker init`)", err)
	}
	if err := yaml.UnmarshalStrict(b, &info); err != nil {
		return info, fmt.Errorf("broker-info file %s: %w", path, err)
	}
	if err := info.Validate(); err != nil {
		return info, fmt.Errorf("broker-info file %s: %w", path, err)
	}
	return info, nil
}

// Write writes the broker-info file, readable by its owner only: it holds a credential.
func (i BrokerInfo) Write(path string) error {
	b, err := yaml.Marshal(i)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Validate says what a broker-info lacks.
func (i BrokerInfo) Validate() error {
	var errs []error
	if u, err := url.Parse(i.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("server %q is not an https URL", i.Server))
	}
	if i.ClusterSet == "" {
		errs = append(errs, errors.New("clusterSet is empty"))
	}
	if i.Token == "" {
		errs = append(errs, errors.New("token is empty"))
	}
	return errors.Join(errs...)
}

// Config is the joiner's client configuration for the broker.
func (i BrokerInfo) Config() *rest.Config {
	return &rest.Config{Host: i.Server, BearerToken: i.Token, TLSClientConfig: rest.TLSClientConfig{CAData: i.CertificateAuthorityData}}
}
