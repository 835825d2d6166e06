package mcsctl

import (
	"fmt"
	"slices"
	"strings"
)

// defaultBroker is the broker context used when --broker-context is not given and the kubeconfig has one of
// that name, as the local fleet's kubeconfig does (test/clusterset.BrokerName, which a shipped binary must not
// link: that package starts control planes).
const defaultBroker = "broker"

// selectContexts picks the member and broker contexts among the kubeconfig's: the members are the --contexts
// given, else every context but the broker's; the broker is --broker-context, else "broker" when it exists.
// Members come back sorted, so that every output lists them in the same order.
func selectContexts(all, members []string, brokerFlag string) ([]string, string, error) {
	broker := brokerFlag
	if broker == "" && slices.Contains(all, defaultBroker) {
		broker = defaultBroker
	}
	if broker != "" && !slices.Contains(all, broker) {
		return nil, "", fmt.Errorf("broker context %q is not in the kubeconfig (contexts: %s)", broker, strings.Join(all, ", "))
	}
	if len(members) == 0 {
		for _, c := range all {
			if c != broker {
				members = append(members, c)
			}
		}
	}
	var unknown []string
	for _, c := range members {
		if !slices.Contains(all, c) {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		return nil, "", fmt.Errorf("contexts not in the kubeconfig: %s", strings.Join(unknown, ", "))
	}
	if len(members) == 0 {
		return nil, "", fmt.Errorf("the kubeconfig has no member context")
	}
	members = slices.Clone(members)
	slices.Sort(members)
	return slices.Compact(members), broker, nil
}

// dnsEnv is the environment variable the local fleet's .fleet/env sets to a member's DNS address (written by
// test/cmd/localfleet), so that `source .fleet/env` is all diagnose needs to reach every member's CoreDNS.
func dnsEnv(context string) string {
	return "FLEET_DNS_" + strings.ToUpper(strings.ReplaceAll(context, "-", "_"))
}

// parseDNSFlags turns --dns member=host:port values into a map, refusing unknown members.
func parseDNSFlags(values, members []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range values {
		ctx, addr, ok := strings.Cut(v, "=")
		if !ok || ctx == "" || addr == "" {
			return nil, fmt.Errorf("--dns %q is not member=host:port", v)
		}
		if !slices.Contains(members, ctx) {
			return nil, fmt.Errorf("--dns %q names no member context", v)
		}
		out[ctx] = addr
	}
	return out, nil
}
