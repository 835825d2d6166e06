package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// options are the flags every subcommand shares.
type options struct {
	config        *genericclioptions.ConfigFlags
	streams       genericiooptions.IOStreams
	contexts      []string
	broker        string
	dns           []string
	inCluster     bool
	image         string
	verbose       int
	output        string
	allNamespaces bool
}

// namespace is -n when given; status, services and diagnose span every namespace otherwise, as with -A: a
// clusterset's services are spread over namespaces, and the context's default namespace says nothing of them.
func (o *options) namespace() (string, error) {
	ns := ""
	if o.config.Namespace != nil {
		ns = *o.config.Namespace
	}
	if ns != "" && o.allNamespaces {
		return "", fmt.Errorf("-n %s and -A (--all-namespaces) exclude each other: give one", ns)
	}
	return ns, nil
}

// singleClusterFlags are the ConfigFlags that name one cluster's address or credentials: kubectl mcs talks to
// several clusters, each through its context, so it refuses them rather than ignore them or apply them to all.
func (o *options) singleClusterFlags() []string {
	var set []string
	for name, v := range map[string]*string{
		"cluster": o.config.ClusterName, "user": o.config.AuthInfoName, "server": o.config.APIServer,
		"tls-server-name": o.config.TLSServerName, "certificate-authority": o.config.CAFile,
		"client-certificate": o.config.CertFile, "client-key": o.config.KeyFile,
		"username": o.config.Username, "password": o.config.Password,
	} {
		if v != nil && *v != "" {
			set = append(set, "--"+name)
		}
	}
	slices.Sort(set)
	return set
}

// restConfig is the config of a context, with the flags that apply to every cluster (--as, --as-group, --as-uid,
// --as-user-extra, --token, --insecure-skip-tls-verify) bound as kubectl binds them, and the request timeout.
func (o *options) restConfig(name string, timeout time.Duration) (*rest.Config, error) {
	f := &genericclioptions.ConfigFlags{
		KubeConfig: o.config.KubeConfig, Context: &name, BearerToken: o.config.BearerToken,
		Impersonate: o.config.Impersonate, ImpersonateUID: o.config.ImpersonateUID,
		ImpersonateGroup: o.config.ImpersonateGroup, ImpersonateUserExtra: o.config.ImpersonateUserExtra,
		Insecure: o.config.Insecure,
	}
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", name, err)
	}
	cfg.Timeout, cfg.QPS, cfg.Burst = timeout, 50, 100
	return cfg, nil
}

// brokerConfig resolves the broker's context and its config, refusing flags that cannot apply to every cluster.
func (o *options) brokerConfig(raw clientcmdapi.Config, timeout time.Duration) (string, *rest.Config, error) {
	if set := o.singleClusterFlags(); len(set) > 0 {
		return "", nil, fmt.Errorf("%s name one cluster's address or credentials, and kubectl mcs talks to several: put them in the kubeconfig's contexts",
			strings.Join(set, ", "))
	}
	contextFlag := ""
	if o.config.Context != nil {
		contextFlag = *o.config.Context
	}
	name, err := brokerContext(slices.Sorted(maps.Keys(raw.Contexts)), raw.CurrentContext, contextFlag, o.broker)
	if err != nil {
		return "", nil, err
	}
	cfg, err := o.restConfig(name, timeout)
	return name, cfg, err
}

// brokerOf reads the kubeconfig and the request timeout, and resolves the broker's context and config, whose
// requests are bounded by the timeout, or by limit when it is shorter.
func (o *options) brokerOf(limit time.Duration) (raw clientcmdapi.Config, name string, cfg *rest.Config, timeout time.Duration, err error) {
	if raw, err = o.config.ToRawKubeConfigLoader().RawConfig(); err != nil {
		return raw, "", nil, 0, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if timeout, err = o.requestTimeout(); err != nil {
		return raw, "", nil, 0, err
	}
	if limit > 0 {
		timeout = min(timeout, limit)
	}
	name, cfg, err = o.brokerConfig(raw, timeout)
	return raw, name, cfg, timeout, err
}

// snapshot reads the clusterset: the broker, which says who the members are, then every member through its
// context; probe asks each member's DNS, and dnsScope, when set, names the services whose DNS names it asks once
// the API data is read.
func (o *options) snapshot(ctx context.Context, probe bool, dnsScope func(*Snapshot) []types.NamespacedName) (*Snapshot, error) {
	raw, brokerCtx, brokerCfg, timeout, err := o.brokerOf(0)
	if err != nil {
		return nil, err
	}
	b, err := readBroker(ctx, brokerCtx, brokerCfg, time.Now)
	if err != nil {
		return nil, brokerError(brokerCtx, err)
	}
	if len(b.Members) == 0 {
		return nil, fmt.Errorf("the broker (context %s) has no member namespace or Lease: no cluster joined yet, or %s is not the broker (name it with --context)",
			brokerCtx, brokerCtx)
	}
	candidates, err := o.candidates(raw, brokerCtx)
	if err != nil {
		return nil, err
	}
	probes := make([]contextProbe, len(candidates))
	var wg sync.WaitGroup
	for i, name := range candidates {
		wg.Go(func() {
			probes[i] = contextProbe{context: name}
			cfg, err := o.restConfig(name, timeout)
			if err == nil {
				probes[i].clusterID, probes[i].clusterSet, err = readClusterID(ctx, cfg, min(timeout, contextProbeTimeout))
			}
			probes[i].err = err
		})
	}
	wg.Wait()
	matches, notes, err := matchContexts(b.Members, probes, len(o.contexts) > 0)
	if err != nil {
		return nil, err
	}
	if o.verbose > 0 {
		for _, n := range notes {
			fmt.Fprintln(o.streams.ErrOut, n)
		}
	}
	dnsFlags, err := parseDNSFlags(o.dns, matches)
	if err != nil {
		return nil, err
	}
	srcs := make([]source, len(matches))
	configs := map[string]*rest.Config{}
	for i, m := range matches {
		srcs[i] = source{memberMatch: m, inCluster: o.inCluster}
		if m.context != "" && m.err == nil {
			srcs[i].config, srcs[i].err = o.restConfig(m.context, timeout)
			configs[m.context] = srcs[i].config
		}
		if !o.inCluster {
			srcs[i].dns, srcs[i].dnsSource = dnsAddress(m, dnsFlags)
		}
	}
	s := collect(ctx, srcs, b, time.Now)
	if !probe {
		return s, nil
	}
	var scope []types.NamespacedName
	if dnsScope != nil {
		scope = dnsScope(s)
	}
	probeDNS(ctx, s, scope, func(m *Member) resolver {
		if o.inCluster {
			m.DNS, m.DNSSource = inClusterAddress, inClusterSource
			return podResolver(configs[m.Context], o.image)
		}
		if m.DNS == "" {
			return nil
		}
		return addressResolver(m.DNS)
	})
	return s, nil
}

// candidates are the contexts that may reach members: --contexts, else every context but the broker's.
func (o *options) candidates(raw clientcmdapi.Config, brokerCtx string) ([]string, error) {
	if len(o.contexts) == 0 {
		var out []string
		for name := range raw.Contexts {
			if name != brokerCtx {
				out = append(out, name)
			}
		}
		return out, nil
	}
	var unknown []string
	for _, c := range o.contexts {
		if _, ok := raw.Contexts[c]; !ok {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("--contexts: not in the kubeconfig: %s", strings.Join(unknown, ", "))
	}
	if slices.Contains(o.contexts, brokerCtx) {
		return nil, fmt.Errorf("--contexts names %s, the broker's context: list member contexts only", brokerCtx)
	}
	return slices.Compact(slices.Sorted(slices.Values(o.contexts))), nil
}

// brokerError says what failed reading the broker, and for a refusal, whose rights are lacking.
func brokerError(context string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("reading the broker (context %s): %w: the user (the context's, or --as/--token) needs read access to the members' namespaces and records there (ExportRecords, EndpointRecords, MemberLeases, and the previous release's ServiceImports, EndpointSlices and Leases)", context, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("reading the broker (context %s): %w: the context's credentials (or --token) are not accepted", context, err)
	default:
		return fmt.Errorf("reading the broker (context %s): %w: check its address and credentials with kubectl --context %s get --raw /version", context, err, context)
	}
}

// requestTimeout is --request-timeout ("0" means the default here, not forever), read as kubectl reads it: a
// bare number is seconds.
func (o *options) requestTimeout() (time.Duration, error) {
	v := ""
	if o.config.Timeout != nil {
		v = *o.config.Timeout
	}
	if v == "" || v == "0" {
		return defaultRequestTimeout, nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--request-timeout %q: %w", v, err)
	}
	return d, nil
}
