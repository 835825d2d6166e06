// Package dnsconformance checks our CoreDNS build against every row of SPEC section 4: it builds ./cmd/coredns,
// starts one member cluster, writes the imported objects the MCS controller would write, runs the binary with
// the kubernetes and multicluster plugins in one server block, and asks every question with dig and with
// miekg/dns, over UDP and over TCP.
package dnsconformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

// env is what TestMain set up for the tests.
var env struct {
	member    *clusterset.Cluster
	port      int    // the DNS port on 127.0.0.1
	clusterIP string // the ClusterIP of the cluster.local Service "local" in namespace conf
	dir, bin  string // the suite's directory and the coredns binary
}

// The fixture: namespace conf of member cluster-a (cluster id east.prod) holds the imports below; source
// cluster cluster-b exists only as the source-cluster label of imported slices.
const (
	ns       = "conf"
	zone     = names.DNSZone + "."
	web      = "web." + ns + ".svc." + zone
	db       = "db." + ns + ".svc." + zone
	down     = "down." + ns + ".svc." + zone
	big      = "big." + ns + ".svc." + zone
	db0      = "db-0.east.prod." + db
	dbB4     = "10-2-0-7.cluster-b." + db
	dbB6     = "fd02--7.cluster-b." + db
	webIPv4  = "10.250.0.10"
	webIPv6  = "fd00:250::10"
	bigCount = 300
)

func TestMain(m *testing.M) {
	framework.Main(m, framework.Suite{Setup: setup})
}

// setup starts the member, writes the fixture and starts CoreDNS, whose output is shown if the suite fails.
func setup(s *framework.Setup) error {
	if _, err := exec.LookPath("dig"); err != nil {
		return errors.New("dig not found: install dnsutils (make tools does)")
	}
	ctx := context.Background()
	var err error
	if env.dir, err = s.TempDir(); err != nil {
		return err
	}
	bin, err := framework.Build()
	if err != nil {
		return err
	}
	env.bin = filepath.Join(bin, "coredns")
	cs, err := s.ClusterSet(clusterset.Options{
		Members: []string{"cluster-a"}, ClusterIDs: map[string]string{"cluster-a": "east.prod"}, NoBroker: true,
	})
	if err != nil {
		return err
	}
	env.member = cs.Members[0]
	if err := createFixture(ctx, env.member.Client); err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	var log bytes.Buffer
	p, err := startCoreDNS(ctx, &log)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, log.String())
	}
	s.Cleanup(func() error {
		p.Stop()
		if s.Failed() {
			fmt.Fprintln(os.Stderr, "coredns output:\n"+log.String())
		}
		return nil
	})
	return nil
}

// startCoreDNS runs coredns with both plugins for the member until it is ready, and sets env.port to its port.
//
// The kubernetes stanza is the shipped one's: it serves every namespace and leaves the imported EndpointSlices to
// multicluster, so the PTRs of their addresses (conformance rows "PTR of a headless endpoint") are multicluster's.
// Without the selector, kubernetes would index them by address and answer those PTRs itself, and for a slice
// without kubernetes.io/service-name (as the fixture's) it builds an invalid name and no reply goes out at all.
func startCoreDNS(ctx context.Context, log io.Writer) (*proc.Process, error) {
	p, port, err := runCoreDNS(ctx, "coredns", memberServer(&corefile.Kubernetes{Reverse: true, LeaveImported: true}), log)
	env.port = port
	return p, err
}

// memberServer is a server block whose kubernetes stanza is k and whose multicluster stanza serves
// clusterset.local and the reverse zones, both reading the member, with a ready plugin.
func memberServer(k *corefile.Kubernetes) corefile.Server {
	return corefile.Server{
		Stock:      corefile.Stock{Ready: true},
		Kubeconfig: env.member.KubeconfigPath, Context: env.member.Name,
		Kubernetes: k, Multicluster: &corefile.Multicluster{Reverse: true},
	}
}

// runCoreDNS runs the binary with the server block s on a free port of 127.0.0.1, which it returns, logging to
// log with name as prefix. With a ready plugin in s, on a free port too, it waits until the server reports ready.
func runCoreDNS(ctx context.Context, name string, s corefile.Server, log io.Writer) (*proc.Process, int, error) {
	ports, err := clusterset.FreePorts(2)
	if err != nil {
		return nil, 0, err
	}
	s.Port, s.Bind, s.ReadyAddr = ports[0], []string{"127.0.0.1"}, "127.0.0.1:"+strconv.Itoa(ports[1])
	p, err := framework.StartCoreDNS(ctx, log, name, env.bin, filepath.Join(env.dir, name+".Corefile"), s)
	if err != nil {
		return nil, 0, err
	}
	return p, s.Port, nil
}

// createFixture writes the imports of the suite, and a cluster.local Service in namespace default whose PTR
// the kubernetes plugin must keep answering.
func createFixture(ctx context.Context, c client.Client) error {
	if err := mcstest.CreateNamespace(ctx, c, ns); err != nil {
		return err
	}
	sql := []discoveryv1.EndpointPort{mcstest.SlicePort("sql", corev1.ProtocolTCP, 5432)}
	http := []discoveryv1.EndpointPort{mcstest.SlicePort("http", corev1.ProtocolTCP, 8080)}
	bigEndpoints := make([]discoveryv1.Endpoint, bigCount)
	for i := range bigEndpoints {
		bigEndpoints[i] = mcstest.Endpoint(fmt.Sprintf("10.3.%d.%d", i/200, i%200+1), "", true)
	}
	objs := []client.Object{
		mcstest.Import(ns, "web", mcsv1beta1.ClusterSetIP, []string{webIPv4, webIPv6},
			mcstest.Port("http", corev1.ProtocolTCP, 80), mcstest.Port("dns", corev1.ProtocolUDP, 53),
			mcstest.Port("dns-tcp", corev1.ProtocolTCP, 53)),
		mcstest.Import(ns, "db", mcsv1beta1.Headless, nil, mcstest.Port("sql", corev1.ProtocolTCP, 5432)),
		mcstest.Slice(ns, "db", "east.prod", discoveryv1.AddressTypeIPv4, sql,
			mcstest.Endpoint("10.1.0.5", "db-0", true), mcstest.Endpoint("10.1.0.6", "db-1", false)),
		mcstest.Slice(ns, "db", "east.prod", discoveryv1.AddressTypeIPv6, sql,
			mcstest.Endpoint("fd01::5", "db-0", true), mcstest.Endpoint("fd01::6", "db-1", false)),
		mcstest.Slice(ns, "db", "cluster-b", discoveryv1.AddressTypeIPv4, sql, mcstest.Endpoint("10.2.0.7", "", true)),
		mcstest.Slice(ns, "db", "cluster-b", discoveryv1.AddressTypeIPv6, sql, mcstest.Endpoint("fd02::7", "", true)),
		mcstest.Import(ns, "down", mcsv1beta1.Headless, nil, mcstest.Port("http", corev1.ProtocolTCP, 8080)),
		mcstest.Slice(ns, "down", "cluster-b", discoveryv1.AddressTypeIPv4, http, mcstest.Endpoint("10.2.1.1", "", false)),
		mcstest.Import(ns, "big", mcsv1beta1.Headless, nil, mcstest.Port("http", corev1.ProtocolTCP, 8080)),
		mcstest.Slice(ns, "big", "cluster-b", discoveryv1.AddressTypeIPv4, http, bigEndpoints...),
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "local"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	svc := objs[len(objs)-1].(*corev1.Service)
	env.clusterIP = svc.Spec.ClusterIP
	if env.clusterIP == "" {
		return errors.New("the cluster.local Service got no ClusterIP")
	}
	return nil
}
