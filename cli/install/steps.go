// Package install puts a clusterset's parts on clusters, as `kubectl mcs` does: the broker's roles and its
// joiner identity (broker init), a member's identity, credentials and manifests (join, rotate), and the member's
// removal (unjoin, and evict from the broker alone). Each step prints what it did, and a failure names the step.
package install

import (
	"context"
	"fmt"
	"io"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/mcs/clusterid"
)

// steps prints each step's outcome to out.
type steps struct{ out io.Writer }

// do runs one step: on success it prints the step's name and what it did, on failure it returns the error
// prefixed with the step's name.
func (s steps) do(name string, fn func() (string, error)) error {
	did, err := fn()
	if err != nil {
		fmt.Fprintf(s.out, "FAIL  %s\n", name)
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(s.out, "ok    %s: %s\n", name, did)
	return nil
}

// scheme holds the built-in kinds and CRDs, all install reads and writes typed.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := aboutv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// newClient is a client of one cluster for install's reads and writes.
func newClient(cfg *rest.Config, cluster string) (client.Client, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the %s: %w", cluster, err)
	}
	return c, nil
}

// clients are the member's and the broker's clients of a command that acts on one member: the broker's with the
// joiner's token of the broker-info.
func clients(memberCfg *rest.Config, info BrokerInfo) (member, broker client.Client, err error) {
	if member, err = newClient(memberCfg, "member"); err != nil {
		return nil, nil, err
	}
	broker, err = newClient(info.Config(), "broker")
	return member, broker, err
}

// memberID reads a joined member's cluster id from its ClusterProperty.
func memberID(ctx context.Context, cfg *rest.Config) (string, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	id, _, err := clusterid.Read(ctx, dyn)
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", fmt.Errorf("the member has no ClusterProperty %s: was it joined? (unjoin takes --cluster-id)", aboutv1alpha1.ClusterIDName)
	}
	return id, clusterid.Validate(id)
}
