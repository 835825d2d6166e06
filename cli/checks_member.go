package cli

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/mcs/names"
)

func corefileCheck(m *Member) Check {
	c := Check{Check: CheckCorefile, Cluster: m.Context}
	if m.Corefile == nil {
		c.Result, c.Message = Unknown, fmt.Sprintf("no ConfigMap %s/%s with a %s key", metav1.NamespaceSystem, corednsConfigMap, corefileKey)
		c.Hint = "the cluster's DNS reads its configuration elsewhere: the dns check asks the DNS server itself whether it serves clusterset.local"
		return c
	}
	how, err := servesZone(*m.Corefile)
	switch {
	case err != nil:
		c.Result, c.Message = Fail, err.Error()
		c.Hint = fmt.Sprintf("fix the Corefile: kubectl --context %s -n %s edit configmap %s", m.Context, metav1.NamespaceSystem, corednsConfigMap)
	case how == "":
		c.Result, c.Message = Fail, "the Corefile has no multicluster stanza for clusterset.local, and does not forward it"
		c.Hint = noZoneHint(m)
	case how == "forward":
		c.Result, c.Message = Pass, "the Corefile forwards clusterset.local (the standalone DNS of kubectl mcs join): the dns check asks whether it answers"
	default:
		c.Result, c.Message = Pass, "the Corefile serves clusterset.local with multicluster"
	}
	return c
}

// noZoneHint says how a member's DNS comes to serve clusterset.local. Only our CoreDNS build has the multicluster
// plugin: a stock CoreDNS given a Corefile naming it stops loading that Corefile, so adding the stanza is
// suggested only when the member's CoreDNS Deployment runs our image.
func noZoneHint(m *Member) string {
	if m.ourCoreDNS() {
		return fmt.Sprintf("the member runs our CoreDNS build (%s): add a `multicluster clusterset.local` stanza to its server block as in Corefile.example: kubectl --context %s -n %s edit configmap %s",
			m.CoreDNSImage, m.Context, metav1.NamespaceSystem, corednsConfigMap)
	}
	return "clusterset.local is served by our CoreDNS build (cmd/coredns), whose multicluster plugin stock CoreDNS lacks " +
		"(a stock CoreDNS stops on a Corefile naming it): set the member's DNS up with kubectl mcs join"
}

// clusterLocalModeCheck stands for the Corefile and clusterset.local checks on a member in the cluster-local DNS
// mode, whose DNS need not serve clusterset.local: each service's cluster-local check judges its reflection.
func clusterLocalModeCheck(m *Member) Check {
	return Check{Check: CheckDNS, Cluster: m.Context, Result: Pass,
		Message: "cluster-local DNS mode (the mcs-controller runs with --cluster-local-services): pods resolve imports as <svc>-clusterset.<ns>.svc in cluster.local, and the member's DNS need not serve clusterset.local"}
}

func zoneCheck(m *Member) Check {
	c := Check{Check: CheckDNS, Cluster: m.Context}
	a, ok := m.DNSAnswers[versionQuery]
	switch {
	case m.DNSError != "":
		c.Result, c.Message = Unknown, m.DNSError
		c.Hint = fmt.Sprintf("the probe needs to create pods in namespace %s of %s and exec into them, and an --image with dig (e.g. nicolaka/netshoot); or pass --dns %s=HOST:PORT",
			probeNamespace, m.Context, m.name())
	case m.DNS == "" || !ok:
		c.Result, c.Message, c.Hint = Unknown, "no DNS address known", dnsHint(m)
	case a.Error != "":
		c = dnsErrorCheck(c, m, a)
	case a.Rcode != "NOERROR" || len(a.Records) == 0:
		c.Result = Fail
		c.Message = fmt.Sprintf("%s answers dns-version.%s with %s: it does not serve the zone", m.DNS, clustersetZone, a.Rcode)
		c.Hint = noZoneHint(m)
	default:
		c.Result = Pass
		c.Message = fmt.Sprintf("%s serves %s (dns-version %s)", m.DNS, names.DNSZone, strings.Join(a.Records, ","))
		if a.Records[0] != names.DNSSchemaVersion {
			c.Message += fmt.Sprintf("; our CoreDNS answers %s", names.DNSSchemaVersion)
		}
	}
	return c
}

// dnsHint says how to reach a member's DNS when it could not be asked, or did not answer.
func dnsHint(m *Member) string {
	reach := fmt.Sprintf("pass --dns %s=HOST:PORT with an address this machine reaches, or --in-cluster to ask from a pod", m.name())
	switch {
	case m.DNSSource == inClusterSource:
		return fmt.Sprintf("the cluster's DNS did not answer its own pods: kubectl --context %s -n %s get pods,endpoints -l k8s-app=%s",
			m.Context, metav1.NamespaceSystem, kubeDNSService)
	case m.DNS == "":
		return fmt.Sprintf("the member has no %s/%s Service: %s", metav1.NamespaceSystem, kubeDNSService, reach)
	case m.inClusterDNS():
		return fmt.Sprintf("%s is the %s Service's ClusterIP, rarely reachable from outside the cluster: %s", m.DNS, kubeDNSService, reach)
	default:
		return fmt.Sprintf("check that a DNS server runs at %s (from %s)", m.DNS, m.DNSSource)
	}
}

// dnsErrorCheck judges a DNS question that got no answer: unknown when the address is in-cluster, which this
// machine rarely reaches, a failure when the user said the DNS server is there.
func dnsErrorCheck(c Check, m *Member, a DNSAnswer) Check {
	c.Result, c.Message, c.Hint = Fail, fmt.Sprintf("no answer from %s: %s", m.DNS, a.Error), dnsHint(m)
	if m.inClusterDNS() {
		c.Result = Unknown
	}
	return c
}

// dataPlaneCheck reports the members whose data-plane probe finds m's endpoints silent, as their broker Leases
// say: a member can renew its Lease while its pods cannot be reached, or the reverse.
func dataPlaneCheck(s *Snapshot, m *Member) Check {
	c := Check{Check: CheckDataPlane, Cluster: m.name()}
	from := s.unreachableFrom(m.ClusterID)
	if len(from) == 0 {
		c.Result, c.Message = Pass, "no member reports its endpoints unreachable"
		return c
	}
	c.Result = Fail
	c.Message = fmt.Sprintf("its endpoints do not answer from %s (their data-plane probes): there, they are imported not ready "+
		"while its Lease lives, and withdrawn once it lapses", strings.Join(from, ", "))
	c.Hint = "check the member's nodes and pods, and the network between its pods and those members' (routes, firewalls); " +
		"they use its endpoints again within seconds of their answering"
	return c
}
