package multicluster

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfig reaches the API server: through the kubeconfig file (with endpoint overriding its server), else
// through endpoint alone, else with the in-cluster service account.
func (cfg *config) restConfig() (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	switch {
	case cfg.kubeconfig != "":
		overrides := &clientcmd.ConfigOverrides{CurrentContext: cfg.context}
		overrides.ClusterInfo.Server = cfg.endpoint
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.kubeconfig}, overrides).ClientConfig()
	case cfg.endpoint != "":
		rc = &rest.Config{Host: cfg.endpoint}
	default:
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	// Informers list once and then watch; the client-side default of 5 QPS only slows the initial sync.
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "coredns-multicluster"
	return rc, nil
}
