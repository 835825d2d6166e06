package install

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/mcs/brokercred"
	"vksfleet.dev/fleet/mcs/names"
)

// RotateOptions say what to rotate.
type RotateOptions struct {
	// CAOnly keeps the member's token and writes the broker-info's server and CA bundle into its kubeconfig, after
	// the broker's serving certificate moved to another CA.
	CAOnly bool
	// TokenExpiration is how long the new token lasts.
	TokenExpiration time.Duration
	// Wait bounds the wait for the controller to take the new credential.
	Wait time.Duration
}

// Rotate gives the member a new broker credential and revokes the old one once its controller runs with the new:
// a token of a new credential (a ServiceAccount and the Secret its tokens are bound to, see mintCredential),
// written into the member's Secret, which the controller switches to without a restart; when the member's broker
// Lease names the new credential, the old token's ServiceAccount is deleted, which revokes every token of it: the
// old one, its renewals, and any a thief asked for with it. With CAOnly, the kubeconfig takes the broker-info's
// server and CA bundle, and the token stays.
func Rotate(ctx context.Context, memberCfg *rest.Config, info BrokerInfo, opts RotateOptions, out io.Writer) error {
	if !opts.CAOnly {
		if err := checkLifetime(opts.TokenExpiration); err != nil {
			return err
		}
	}
	s := steps{out}
	m, b, err := clients(memberCfg, info)
	if err != nil {
		return err
	}
	var id string
	err = s.do("cluster id", func() (string, error) {
		id, err = memberID(ctx, memberCfg)
		return id, err
	})
	if err != nil {
		return err
	}
	var old *brokercred.Credential
	err = s.do("current credential", func() (string, error) {
		kubeconfig, err := readMemberKubeconfig(ctx, m)
		if err != nil {
			return "", err
		}
		if kubeconfig == nil {
			return "", fmt.Errorf("no Secret %s/%s: join the member first", controllerNamespace, brokerSecret)
		}
		if old, err = brokercred.Parse(kubeconfig); err != nil {
			return "", err
		}
		return old.ID(), nil
	})
	if err != nil {
		return err
	}
	if opts.CAOnly {
		return s.do("broker server and CA", func() (string, error) {
			kubeconfig, err := MemberKubeconfig(info, old.Config.BearerToken)
			if err != nil {
				return "", err
			}
			if err := writeMemberKubeconfig(ctx, m, kubeconfig); err != nil {
				return "", err
			}
			return fmt.Sprintf("the member reaches %s with the broker-info's CA bundle (%d bytes); its token is kept", info.Server, len(info.CertificateAuthorityData)), nil
		})
	}
	var anchor string
	err = s.do("new credential", func() (string, error) {
		var kubeconfig []byte
		if kubeconfig, anchor, err = mintCredential(ctx, b, info, id, opts.TokenExpiration); err != nil {
			return "", err
		}
		if err := writeMemberKubeconfig(ctx, m, kubeconfig); err != nil {
			return "", err
		}
		return fmt.Sprintf("a token of credential %s/%s, for %v, in Secret %s/%s", names.BrokerNamespace(id), anchor, opts.TokenExpiration, controllerNamespace, brokerSecret), nil
	})
	if err != nil {
		return err
	}
	err = s.do("controller switched", func() (string, error) {
		return "its MemberLease names " + anchor, waitFor(ctx, opts.Wait, func() error {
			l, err := memberLease(ctx, b, id)
			if err != nil {
				return err
			}
			if got := l.GetAnnotations()[names.AnnotationCredential]; got != anchor {
				return fmt.Errorf("the member's MemberLease names credential %q, not %q yet: see `kubectl -n %s logs deploy/%s`", got, anchor, controllerNamespace, controllerDeployment)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return s.do("old credential revoked", func() (string, error) {
		c := old.Claims
		if c == nil || c.ServiceAccount == "" {
			return fmt.Sprintf("not a ServiceAccount token (%s): it stays valid until it expires, or until you revoke it where it was issued", old.ID()), nil
		}
		ns := names.BrokerNamespace(id)
		if c.Namespace != ns {
			return "", fmt.Errorf("the old token is of ServiceAccount %s/%s, outside the member's broker namespace %s: revoke it yourself", c.Namespace, c.ServiceAccount, ns)
		}
		deleted, err := revokeCredential(ctx, b, ns, c.ServiceAccount, c.BoundSecret)
		if err != nil {
			return "", err
		}
		did := fmt.Sprintf("deleted ServiceAccount %s/%s, which revokes every token of it", ns, c.ServiceAccount)
		switch {
		case deleted != "":
			did += fmt.Sprintf(", and Secret %s/%s its token was bound to", ns, deleted)
		case c.BoundSecret != "":
			did += fmt.Sprintf("; Secret %s/%s, which its token was bound to and an administrator made, is left to them", ns, c.BoundSecret)
		}
		return did, nil
	})
}
