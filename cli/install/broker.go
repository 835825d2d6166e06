package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	// RotateJoiner revokes every joiner token issued before, broker-info files of earlier inits included, by
	// making the joiner's ServiceAccount anew.
	RotateJoiner bool
}

// BrokerInit prepares the API server cfg reaches as the clusterset's broker: the CRDs, the members' roles, the
// joiner identity and the admission policies that confine it, applied server-side (so running it again changes
// nothing), and returns the broker-info that join needs, with a new joiner token. It takes away the cluster-wide
// read grants of earlier releases, which the joiner no longer may.
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
	if opts.RotateJoiner {
		err = s.do("joiner tokens revoked", func() (string, error) {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: joinerNamespace, Name: joinerName}}
			if err := c.Delete(ctx, sa); client.IgnoreNotFound(err) != nil {
				return "", err
			}
			return fmt.Sprintf("deleted ServiceAccount %s/%s, which revokes every broker-info written before; it is made anew below", joinerNamespace, joinerName), nil
		})
		if err != nil {
			return info, err
		}
	}
	err = s.do("broker roles", func() (string, error) {
		objs, err := brokerObjects()
		if err != nil {
			return "", err
		}
		if err := apply(ctx, c, objs); meta.IsNoMatchError(err) {
			return "", fmt.Errorf("%w: the joiner's admission policies need a broker that serves %s ValidatingAdmissionPolicy (Kubernetes 1.30 or later); without them the joiner's rights are not confined",
				err, admissionregistrationv1.SchemeGroupVersion)
		} else if err != nil {
			return "", fmt.Errorf("%w (init needs cluster-admin rights on the broker)", err)
		}
		return fmt.Sprintf("applied %d objects (CRDs, member roles, the joiner in namespace %s and its admission policies)", len(objs), joinerNamespace), nil
	})
	if err != nil {
		return info, err
	}
	err = s.do("joiner confined", func() (string, error) {
		start := time.Now()
		if err := waitConfined(ctx, cfg); err != nil {
			return "", err
		}
		return fmt.Sprintf("the broker applies its admission policies after %v", time.Since(start).Round(time.Millisecond)), nil
	})
	if err != nil {
		return info, err
	}
	err = s.do("cluster-wide grants of earlier releases", func() (string, error) {
		n, err := deleteLegacyReaderBindings(ctx, c)
		return fmt.Sprintf("%d ClusterRoleBindings of %s deleted", n, readerRole), err
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

// brokerObjects are the objects broker init applies, and broker uninstall deletes: build/deploy/broker, rendered.
func brokerObjects() ([]*unstructured.Unstructured, error) { return rendered("broker") }

// waitConfined waits until the broker refuses the joiner what only the admission policy refuses it, a
// ServiceAccount in kube-system (asked for by impersonation, as a dry run), before init hands out a token of it:
// the API server loads new policies in the background.
func waitConfined(ctx context.Context, cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + joinerNamespace + ":" + joinerName,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + joinerNamespace, "system:authenticated"},
	}
	joiner, err := newClient(cfg, "broker")
	if err != nil {
		return err
	}
	probe := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "mcs-joiner-probe"}}
	return waitFor(ctx, time.Minute, func() error {
		err := joiner.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("the joiner may still create a ServiceAccount in %s (%v): the broker does not apply the policy mcs-broker-joiner", probe.Namespace, err)
	})
}

// deleteLegacyReaderBindings deletes the ClusterRoleBindings mcs-broker-reader-<id> that let a member read the
// whole broker before the member directory, and returns how many: join did it once, but the joiner may no longer
// touch a ClusterRoleBinding.
func deleteLegacyReaderBindings(ctx context.Context, c client.Client) (int, error) {
	var crbs rbacv1.ClusterRoleBindingList
	if err := c.List(ctx, &crbs); err != nil {
		return 0, err
	}
	n := 0
	for i := range crbs.Items {
		crb := &crbs.Items[i]
		if !isLegacyReaderBinding(crb) {
			continue
		}
		if err := c.Delete(ctx, crb); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting ClusterRoleBinding %s: %w", crb.Name, err)
		}
		n++
	}
	return n, nil
}

// isLegacyReaderBinding says whether crb is one that join made for a member before the member directory.
func isLegacyReaderBinding(crb *rbacv1.ClusterRoleBinding) bool {
	return strings.HasPrefix(crb.Name, readerRole+"-") && crb.RoleRef.Kind == "ClusterRole" && crb.RoleRef.Name == readerRole
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
