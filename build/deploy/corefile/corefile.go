// Package corefile renders every Corefile of the project from one template (corefile.tmpl): the one users deploy
// (build/deploy/coredns/Corefile and Corefile.example), the server block the replace mode appends to a cluster's
// own Corefile (join, the Helm chart's hooks, replace-kube-dns.sh), and those the tests and benchmarks run. A test
// keeps the checked-in files equal to their rendering, so that the files users read and the servers the tests run
// cannot drift apart.
package corefile

import (
	"bytes"
	_ "embed"
	"strings"
	"text/template"
	"time"
)

//go:embed corefile.tmpl
var text string

var tmpl = template.Must(template.New("corefile").
	Funcs(template.FuncMap{"join": func(s []string) string { return strings.Join(s, " ") }}).
	Parse(text))

// Server is one server block: the knobs that differ between the places that run our CoreDNS. Its zero value is a
// block for every name on port 53 with errors alone.
type Server struct {
	// Zone is the zone the block serves: every name when empty.
	Zone string
	// Port is the DNS port: 53 when zero.
	Port int
	// Bind lists the addresses to listen on: every interface when empty.
	Bind []string
	// Comments adds the shipped Corefile's comments: what it is, the multicluster options and a transfer example.
	Comments bool
	// Pprof is the address of a pprof listener, none when empty.
	Pprof string

	// Stock says which of the stock plugins of kubeadm's Corefile the block has.
	Stock Stock
	// HealthAddr, ReadyAddr and MetricsAddr are where health, ready and prometheus listen: their defaults (:8080,
	// :8181, :9153) when empty. Servers outside a cluster give each a free loopback port.
	HealthAddr, ReadyAddr, MetricsAddr string
	// Upstream is where forward sends the names no plugin answers: the node's resolvers when empty.
	Upstream string
	// ReloadEvery is how often reload checks the Corefile: its default, 30 s, when zero.
	ReloadEvery time.Duration

	// Kubeconfig and Context, or Endpoint, are where kubernetes and multicluster read the API server: the
	// in-cluster service account when all are empty.
	Kubeconfig, Context, Endpoint string
	// Kubernetes is the stock kubernetes plugin's stanza for cluster.local, none when nil.
	Kubernetes *Kubernetes
	// Multicluster is our plugin's stanza for clusterset.local, none when nil.
	Multicluster *Multicluster
	// TransferTo, when set, lets the block transfer its zones to these secondaries ("*": any).
	TransferTo string
	// Whoami answers every name that reaches it with the asker's address: the benchmark's ceiling.
	Whoami bool
}

// Stock lists the stock plugins of kubeadm's Corefile around kubernetes.
type Stock struct {
	Health, Ready, Prometheus, Forward, Cache, Loop, Reload, Loadbalance bool
}

// Kubeadm is every stock plugin of kubeadm's Corefile.
var Kubeadm = Stock{Health: true, Ready: true, Prometheus: true, Forward: true, Cache: true, Loop: true, Reload: true, Loadbalance: true}

// Kubernetes is the stanza of the stock kubernetes plugin.
type Kubernetes struct {
	// Reverse adds the reverse zones, falling through for the addresses that are not cluster.local's.
	Reverse bool
	// Namespaces limits the plugin to these namespaces: all when empty.
	Namespaces []string
	// Pods answers pod names (pods insecure), as kubeadm's Corefile does.
	Pods bool
	// LeaveImported leaves the imported EndpointSlices (labelled multicluster.kubernetes.io/source-cluster) to
	// multicluster: kubernetes neither lists, caches nor indexes them, which saves their memory twice over, and
	// their addresses' PTRs are multicluster's. kubernetes never needs them: the derived Services they belong to
	// are ClusterIP Services, whose records come from the Service alone.
	LeaveImported bool
	// Multicluster serves clusterset.local with the kubernetes plugin of stock CoreDNS 1.15 (its multicluster
	// option) instead of ours: what our benchmark compares with.
	Multicluster bool
	// TTL is the TTL of the answers, in seconds: the plugin's default, 5, when zero.
	TTL int
}

// Multicluster is the stanza of our multicluster plugin. Its TTL is always the default, 5 s, written out so
// that readers of the Corefile see it.
type Multicluster struct {
	// Reverse adds the reverse zones, for the PTRs of clusterset IPs and headless endpoints.
	Reverse bool
}

// Deployed is the Corefile users deploy, build/deploy/coredns/Corefile: kubeadm's, with multicluster.
func Deployed() Server {
	return Server{
		Comments:     true,
		Stock:        Kubeadm,
		Kubernetes:   &Kubernetes{Reverse: true, Pods: true, LeaveImported: true, TTL: 30},
		Multicluster: &Multicluster{Reverse: true},
	}
}

// appended is the server block the replace mode appends to a cluster's own Corefile.
func appended() Server {
	return Server{Zone: "clusterset.local", Stock: Stock{Prometheus: true, Loadbalance: true}, Multicluster: &Multicluster{}}
}

// Render returns the Corefile of the server block.
func (s Server) Render() string { return execute("server", s) }

// Files returns the checked-in Corefiles, by path from the repository's root, as they must read.
func Files() map[string]string {
	deployed := Deployed().Render()
	return map[string]string{
		"Corefile.example":                                deployed,
		"build/deploy/coredns/Corefile":                   deployed,
		"build/deploy/replace-kube-dns/clusterset.server": execute("appended", appended()),
	}
}

// execute runs a template of the file: they only read Server's fields, so an error is a bug in the template.
func execute(name string, s Server) string {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, s); err != nil {
		panic(err)
	}
	return b.String()
}
