package mcsctl

import "testing"

func TestServesZone(t *testing.T) {
	cases := []struct {
		name, corefile string
		want, err      bool
	}{
		{"stanza with the zone", ".:53 {\n  kubernetes cluster.local\n  multicluster clusterset.local {\n    ttl 5\n  }\n}\n", true, false},
		{"zone with a dot and PTR zones", ".:53 {\n  multicluster clusterset.local. in-addr.arpa\n}\n", true, false},
		{"zone from the server block", "clusterset.local:53 {\n  multicluster\n}\n", true, false},
		{"no stanza", ".:53 {\n  kubernetes cluster.local\n  forward . /etc/resolv.conf\n}\n", false, false},
		{"commented out", ".:53 {\n  # multicluster clusterset.local\n  errors\n}\n", false, false},
		{"another zone", ".:53 {\n  multicluster example.org\n}\n", false, false},
		{"zoneless stanza in a root block", ".:53 {\n  multicluster\n}\n", false, false},
		{"broken", ".:53 {\n  multicluster clusterset.local {\n", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := servesZone(c.corefile)
			if got != c.want || (err != nil) != c.err {
				t.Errorf("servesZone = %v, %v; want %v, error %v", got, err, c.want, c.err)
			}
		})
	}
}
