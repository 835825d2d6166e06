package cli

import "testing"

func TestServesZone(t *testing.T) {
	cases := []struct {
		name, corefile, want string
		err                  bool
	}{
		{"stanza with the zone", ".:53 {\n  kubernetes cluster.local\n  multicluster clusterset.local {\n    ttl 5\n  }\n}\n", "multicluster", false},
		{"zone with a dot and PTR zones", ".:53 {\n  multicluster clusterset.local. in-addr.arpa\n}\n", "multicluster", false},
		{"zone from the server block", "clusterset.local:53 {\n  multicluster\n}\n", "multicluster", false},
		{"no stanza", ".:53 {\n  kubernetes cluster.local\n  forward . /etc/resolv.conf\n}\n", "", false},
		{"commented out", ".:53 {\n  # multicluster clusterset.local\n  errors\n}\n", "", false},
		{"another zone", ".:53 {\n  multicluster example.org\n}\n", "", false},
		{"zoneless stanza in a root block", ".:53 {\n  multicluster\n}\n", "", false},
		{"forwarded, as join's standalone mode appends", ".:53 {\n  forward . /etc/resolv.conf\n}\n# BEGIN vksfleet multicluster\nclusterset.local:53 {\n    errors\n    forward . 10.96.0.20\n}\n# END vksfleet multicluster\n", "forward", false},
		{"a clusterset.local block without forward", "clusterset.local:53 {\n  errors\n}\n", "", false},
		{"broken", ".:53 {\n  multicluster clusterset.local {\n", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := servesZone(c.corefile)
			if got != c.want || (err != nil) != c.err {
				t.Errorf("servesZone = %q, %v; want %q, error %v", got, err, c.want, c.err)
			}
		})
	}
}
