package multicluster

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/miekg/dns"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/kubesource"
	"vksfleet.dev/fleet/plugin/zone"
)

// Name is the plugin's directive.
const Name = "multicluster"

var log = clog.NewWithPlugin(Name)

func init() { plugin.Register(Name, setup) }

// config is a parsed multicluster stanza.
type config struct {
	zone        string   // the forward zone
	reverse     []string // reverse zones served for PTR (ptrRanges gives the addresses they cover)
	kubeconfig  string
	context     string
	endpoint    string
	noEndpoints bool
	fall        fall.F
	ttl         uint32
	clusterID   string
	// managers are the endpointslice.kubernetes.io/managed-by values of the EndpointSlices served; none: every
	// manager's.
	managers []string
}

const (
	defaultTTL = 5
	maxTTL     = 3600
)

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error(Name, err)
	}
	rc, err := cfg.restConfig()
	if err != nil {
		return plugin.Error(Name, err)
	}
	m, src, err := newWithSource(cfg, rc, nameServerAddrs(dnsserver.GetConfig(c).ListenHosts))
	if err != nil {
		return plugin.Error(Name, err)
	}
	c.OnStartup(func() error {
		start(src, syncTimeout)
		go reportClusterID(rc, cfg.clusterID)
		return nil
	})
	c.OnShutdown(func() error {
		stop(src)
		return nil
	})
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		m.Next = next
		return m
	})
	return nil
}

// syncTimeout bounds how long a starting server waits for the informers, as the kubernetes plugin's 5 s does.
const syncTimeout = 5 * time.Second

// start starts src and waits until its index holds what the informers listed, for at most timeout. Caddy runs
// OnStartup before the new instance serves, on a Corefile reload too, while the old instance still answers: a
// server that started serving at once would answer SERVFAIL (see errNotSynced) until its fresh informers had
// listed everything, with the pod Ready all along. Past timeout it serves anyway, SERVFAIL until synced, rather
// than hold a reload, or a start against an API server that is away, for ever. From the start on, src counts in
// coredns_multicluster_synced.
func start(src *kubesource.Source, timeout time.Duration) {
	synced.track(src)
	src.Start()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return src.HasSynced(), nil }); err != nil {
		log.Warningf("serving before the informers have synced, after %s: SERVFAIL until they have", timeout)
	}
}

// stop stops a source that start started.
func stop(src *kubesource.Source) {
	src.Stop()
	synced.untrack(src)
}

// parse reads the one multicluster stanza of a server block.
func parse(c *caddy.Controller) (*config, error) {
	var cfg *config
	for c.Next() {
		if cfg != nil {
			return nil, plugin.ErrOnce
		}
		var err error
		if cfg, err = parseStanza(c); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func parseStanza(c *caddy.Controller) (*config, error) {
	cfg := &config{ttl: defaultTTL, managers: []string{names.ManagedBy}}
	for _, z := range plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), c.ServerBlockKeys) {
		switch {
		case dns.IsSubDomain("in-addr.arpa.", z) || dns.IsSubDomain("ip6.arpa.", z):
			if _, ok := reversePrefix(z); !ok {
				return nil, c.Errf("%s is not the reverse zone of an address range; give the range as a CIDR, such as 10.0.0.0/8", z)
			}
			cfg.reverse = append(cfg.reverse, z)
		case cfg.zone != "":
			return nil, c.Errf("one forward zone is served, got %s and %s", cfg.zone, z)
		default:
			cfg.zone = z
		}
	}
	if cfg.zone == "" {
		return nil, c.Err("a forward zone such as clusterset.local is required")
	}
	if err := zone.CheckZone(cfg.zone); err != nil {
		return nil, c.Err(err.Error())
	}
	for c.NextBlock() {
		switch c.Val() {
		case "kubeconfig":
			args := c.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return nil, c.ArgErr()
			}
			cfg.kubeconfig = args[0]
			if len(args) == 2 {
				cfg.context = args[1]
			}
		case "endpoint":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			cfg.endpoint = args[0]
		case "noendpoints":
			if c.NextArg() {
				return nil, c.ArgErr()
			}
			cfg.noEndpoints = true
		case "fallthrough":
			cfg.fall.SetZonesFromArgs(c.RemainingArgs())
		case "ttl":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			t, err := strconv.Atoi(args[0])
			if err != nil || t < 0 || t > maxTTL {
				return nil, c.Errf("ttl must be an integer from 0 to %d, got %q", maxTTL, args[0])
			}
			cfg.ttl = uint32(t)
		case "clusterid":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			cfg.clusterID = args[0]
		case "managers":
			managers, err := parseManagers(c)
			if err != nil {
				return nil, err
			}
			cfg.managers = managers
		default:
			return nil, c.Errf("unknown property %q", c.Val())
		}
	}
	return cfg, nil
}

// parseManagers reads the arguments of managers: the managed-by values of the EndpointSlices served, or * alone
// for every manager's, which it returns as none. Each value must be one a label can hold.
func parseManagers(c *caddy.Controller) ([]string, error) {
	args := c.RemainingArgs()
	if len(args) == 0 {
		return nil, c.ArgErr()
	}
	if slices.Contains(args, "*") {
		if len(args) > 1 {
			return nil, c.Errf("managers: * serves every manager and stands alone, got %s", strings.Join(args, " "))
		}
		return nil, nil
	}
	for _, a := range args {
		errs := validation.IsValidLabelValue(a)
		if a == "" {
			errs = []string{"must not be empty"}
		}
		if len(errs) > 0 {
			return nil, c.Errf("managers: %q is not a managed-by label value: %s", a, strings.Join(errs, "; "))
		}
	}
	return args, nil
}

// newWithSource returns the plugin for cfg fed by a source watching the cluster rc reaches; the caller starts
// and stops the source.
func newWithSource(cfg *config, rc *rest.Config, nameServers []netip.Addr) (*MultiCluster, *kubesource.Source, error) {
	m := newPlugin(cfg, nameServers)
	src, err := kubesource.New(kubesource.Options{Config: rc, Index: m.index, NoEndpoints: cfg.noEndpoints,
		Managers: cfg.managers, Observer: observer{}})
	if err != nil {
		return nil, nil, err
	}
	m.synced = src.HasSynced
	return m, src, nil
}

// newPlugin returns the plugin for cfg with an empty index; synced reports false until a source is attached.
func newPlugin(cfg *config, nameServers []netip.Addr) *MultiCluster {
	return &MultiCluster{
		zone:    cfg.zone,
		reverse: cfg.reverse,
		fall:    cfg.fall,
		index:   zone.New(zone.Options{Zone: cfg.zone, TTL: cfg.ttl, NameServers: nameServers, Reverse: ptrRanges(cfg.reverse)}),
		synced:  func() bool { return false },
	}
}
