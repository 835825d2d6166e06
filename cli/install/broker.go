package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/build/deploy"
)

// The joiner's identity on the broker, as build/deploy/broker/joiner.yaml names it.
const (
	joinerNamespace = "mcs-broker"
	joinerName      = "joiner"
)

// InitOptions say how to prepare a broker.
type InitOptions struct {
	// ClusterSet is the clusterset's name.
	ClusterSet string
	// Server is the broker's URL as members reach it; default the URL of the client configuration.
	Server string
	// TokenExpiration is how long the joiner's token in the broker-info file lasts.
	TokenExpiration time.Duration
}

// BrokerInit prepares the API server cfg reaches as the clusterset's broker: the CRDs, the members' roles and the
// joiner identity, applied server-side (so running it again changes nothing), and returns the broker-info that
// join needs, with a new joiner token.
func BrokerInit(ctx context.Context, cfg *rest.Config, opts InitOptions, out io.Writer) (BrokerInfo, error) {
	s := steps{out}
	info := BrokerInfo{Server: opts.Server, ClusterSet: opts.ClusterSet}
	if info.Server == "" {
		info.Server = cfg.Host
	}
	c, err := newClient(cfg, "broker")
	if err != nil {
		return info, err
	}
	err = s.do("broker roles", func() (string, error) {
		manifests, err := deploy.Render("broker")
		if err != nil {
			return "", err
		}
		objs, err := decode(manifests)
		if err != nil {
			return "", err
		}
		if err := apply(ctx, c, objs); err != nil {
			return "", fmt.Errorf("%w (init needs cluster-admin rights on the broker)", err)
		}
		return fmt.Sprintf("applied %d objects (CRDs, member roles, the joiner in namespace %s)", len(objs), joinerNamespace), nil
	})
	if err != nil {
		return info, err
	}
	err = s.do("broker CA", func() (string, error) {
		if info.CertificateAuthorityData, err = caData(cfg); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d bytes, from the kubeconfig", len(info.CertificateAuthorityData)), nil
	})
	if err != nil {
		return info, err
	}
	err = s.do("joiner token", func() (string, error) {
		sa := &corev1.ServiceAccount{}
		sa.Namespace, sa.Name = joinerNamespace, joinerName
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(opts.TokenExpiration / time.Second))}}
		if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
			return "", err
		}
		info.Token = req.Status.Token
		return fmt.Sprintf("expires %s", req.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)), nil
	})
	if err != nil {
		return info, err
	}
	return info, info.Validate()
}

// caData is the CA bundle of a client configuration, from its data or its file.
func caData(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		return os.ReadFile(cfg.CAFile)
	}
	if cfg.Insecure {
		return nil, errors.New("the kubeconfig skips TLS verification of the broker; members need its CA: set certificate-authority-data")
	}
	// The system's roots: members then need the same, which a pod's image may not hold.
	return nil, errors.New("the kubeconfig names no CA for the broker; members need one: set certificate-authority-data")
}
