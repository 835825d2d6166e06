package cli

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// defaultBroker is the broker context used when neither --context nor --broker-context is given and the
// kubeconfig has one of that name, as the local fleet's kubeconfig does (test/env/clusterset.BrokerName, which a
// shipped binary must not link: that package starts control planes).
const defaultBroker = "broker"

// brokerContext picks the broker's context: --context, kubectl's "the cluster you talk to", or its alias
// --broker-context; else "broker" when the kubeconfig has it, since the local fleet's current context is a
// member; else the current context, as kubectl would.
func brokerContext(all []string, current, contextFlag, brokerFlag string) (string, error) {
	if contextFlag != "" && brokerFlag != "" && contextFlag != brokerFlag {
		return "", fmt.Errorf("--context %q and --broker-context %q differ: --broker-context is an alias of --context, give one", contextFlag, brokerFlag)
	}
	name := contextFlag
	switch {
	case name != "":
	case brokerFlag != "":
		name = brokerFlag
	case slices.Contains(all, defaultBroker):
		name = defaultBroker
	case current != "":
		name = current
	default:
		return "", fmt.Errorf("no broker context: the kubeconfig has no context %q and no current context; pass --context BROKER", defaultBroker)
	}
	if !slices.Contains(all, name) {
		return "", fmt.Errorf("broker context %q is not in the kubeconfig (contexts: %s)", name, strings.Join(all, ", "))
	}
	return name, nil
}

// memberIDs are the cluster ids the broker knows as members: each member's controller creates its namespace
// (names.BrokerNamespace, annotated with the id, though one the manifests created has no annotation), renews its
// Lease there and writes its export records and slices there, each annotated with the id. Any of them counts, so
// that a member whose Lease expired or was deleted is still seen, and reported. Only objects in the namespace
// their id names count: any member could write an annotation naming another.
func memberIDs(namespaces []corev1.Namespace, objects []metav1.Object) []string {
	var ids []string
	for i := range namespaces {
		if id := broker.ClusterOf(&namespaces[i]); id != "" && namespaces[i].Name == names.BrokerNamespace(id) {
			ids = append(ids, id)
		}
	}
	for _, obj := range objects {
		if id := broker.ClusterOf(obj); id != "" && obj.GetNamespace() == names.BrokerNamespace(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// contextProbe is what reading a context's cluster id found.
type contextProbe struct {
	context string
	// clusterID and clusterSet are the context's ClusterProperties; clusterID is "" when it has none.
	clusterID, clusterSet string
	// err says why the context could not be read.
	err error
}

// memberMatch is one member of the clusterset and the context that reaches it.
type memberMatch struct {
	// clusterID is the member's id; "" only for a --contexts context that could not be read.
	clusterID, clusterSet string
	// context is "" when no context of the kubeconfig reaches the member.
	context string
	// err says why the context named by --contexts could not be read.
	err error
}

// matchContexts pairs the broker's member ids with the probed contexts by cluster id. With explicit (--contexts
// given) only the probed contexts are members: one that cannot be read is kept, with its error, since the user
// asked for it; one that is no member of the broker is an error. Otherwise a context that cannot be read, or
// reaches no member, is left out with a note, and a member no context reaches is kept without a context. Two
// contexts reaching the same member (an admin and a read-only context, say) count once, the first by name.
// Members come back with a context first, sorted by context, then those without one, sorted by id, so that every
// output lists them in the same order.
func matchContexts(ids []string, probes []contextProbe, explicit bool) ([]memberMatch, []string, error) {
	probes = slices.Clone(probes)
	slices.SortFunc(probes, func(a, b contextProbe) int { return strings.Compare(a.context, b.context) })
	var out []memberMatch
	var notes, notMembers []string
	byID := map[string]string{}
	for _, p := range probes {
		switch {
		case p.err != nil && explicit:
			out = append(out, memberMatch{context: p.context, err: p.err})
		case p.err != nil:
			notes = append(notes, fmt.Sprintf("context %s ignored: its cluster id could not be read (%v); name it in --contexts to see it as a member", p.context, p.err))
		case !slices.Contains(ids, p.clusterID):
			what := fmt.Sprintf("cluster id %q", p.clusterID)
			if p.clusterID == "" {
				what = "no cluster id (no ClusterProperty cluster.clusterset.k8s.io)"
			}
			if explicit {
				notMembers = append(notMembers, fmt.Sprintf("%s (%s)", p.context, what))
				continue
			}
			notes = append(notes, fmt.Sprintf("context %s ignored: %s, not a member of the broker", p.context, what))
		case byID[p.clusterID] != "":
			notes = append(notes, fmt.Sprintf("context %s ignored: it reaches member %s, read through context %s", p.context, p.clusterID, byID[p.clusterID]))
		default:
			byID[p.clusterID] = p.context
			out = append(out, memberMatch{clusterID: p.clusterID, clusterSet: p.clusterSet, context: p.context})
		}
	}
	if len(notMembers) > 0 {
		return nil, nil, fmt.Errorf("--contexts names contexts that are no member of the broker: %s; a cluster becomes a member with kubectl mcs join",
			strings.Join(notMembers, ", "))
	}
	if !explicit {
		for _, id := range ids {
			if byID[id] == "" {
				out = append(out, memberMatch{clusterID: id})
			}
		}
	}
	return out, notes, nil
}

// dnsEnv is the environment variable the local fleet's .fleet/env sets to a member's DNS address (written by
// test/cmd/localfleet, named after the member), so that `source .fleet/env` is all diagnose needs to reach every
// member's CoreDNS.
func dnsEnv(member string) string {
	return "FLEET_DNS_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(member))
}

// parseDNSFlags turns --dns member=host:port values into a map keyed by member, where a member is named by its
// context or its cluster id, refusing names that are neither.
func parseDNSFlags(values []string, members []memberMatch) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		name, addr, ok := strings.Cut(v, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--dns %q is not member=host:port", v)
		}
		if !slices.ContainsFunc(members, func(m memberMatch) bool { return name == m.context || name == m.clusterID }) {
			return nil, fmt.Errorf("--dns %q names no member, by context or cluster id", v)
		}
		out[name] = addr
	}
	return out, nil
}
