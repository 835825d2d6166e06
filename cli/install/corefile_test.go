package install

import "testing"

func TestWithBlock(t *testing.T) {
	const block = blockBegin + " (join)\nclusterset.local:53 {\n    forward . 10.0.0.9\n}\n" + blockEnd + "\n"
	const other = blockBegin + " (join)\nclusterset.local:53 {\n    forward . 10.0.0.7\n}\n" + blockEnd + "\n"
	const stock = ".:53 {\n    errors\n}\n"
	for _, tc := range []struct {
		name, corefile, want string
		changed              bool
	}{
		{"appended", stock, stock + block, true},
		{"appended after a last line without newline", ".:53 {\n}", ".:53 {\n}\n" + block, true},
		{"already there", stock + block, stock + block, false},
		{"another address replaced", stock + other, stock + block, true},
		{"block in the middle replaced, lines after kept", stock + other + "# mine\n", stock + "# mine\n" + block, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := withBlock(tc.corefile, block)
			if got != tc.want || changed != tc.changed {
				t.Errorf("withBlock = %q, %v; want %q, %v", got, changed, tc.want, tc.changed)
			}
		})
	}
}

func TestWithoutBlock(t *testing.T) {
	const block = blockBegin + "\nx\n" + blockEnd + "\n"
	for _, tc := range []struct {
		name, corefile, want string
		removed              bool
	}{
		{"none", ".:53 {\n}\n", ".:53 {\n}\n", false},
		{"at the end", ".:53 {\n}\n" + block, ".:53 {\n}\n", true},
		{"end marker without newline", ".:53 {\n}\n" + blockBegin + "\nx\n" + blockEnd, ".:53 {\n}\n", true},
		{"in the middle", "a\n" + block + "b\n", "a\nb\n", true},
		{"no end marker: left alone", "a\n" + blockBegin + "\nb\n", "a\n" + blockBegin + "\nb\n", false},
		{"marker text inside a line is not a marker", "a # BEGIN vksfleet multicluster\n", "a # BEGIN vksfleet multicluster\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, removed := withoutBlock(tc.corefile)
			if got != tc.want || removed != tc.removed {
				t.Errorf("withoutBlock = %q, %v; want %q, %v", got, removed, tc.want, tc.removed)
			}
		})
	}
}

func TestWithForward(t *testing.T) {
	const block = blockBegin + " (join)\nclusterset.local:53 {\n    forward . 10.0.0.9\n}\n" + blockEnd + "\n"
	const stale = blockBegin + " (join)\nclusterset.local:53 {\n    forward . 10.0.0.7\n}\n" + blockEnd + "\n"
	const stock = ".:53 {\n    errors\n    reload\n}\n"
	const aks = stock + "import custom/*.server\n"
	const theirs = "clusterset.local:53 {\n    forward . 10.0.0.5\n}\n"
	const inCorefile = "a server block of the Corefile"
	const inCustom = "key clusterset.server of ConfigMap kube-system/coredns-custom"
	for _, tc := range []struct {
		name, corefile string
		custom         map[string]string
		want           string
		changed        bool
		servedBy       string
	}{
		{"stock: appended", stock, nil, stock + block, true, ""},
		{"ours already there", stock + block, nil, stock + block, false, ""},
		{"theirs in the Corefile: left alone", stock + theirs, nil, stock + theirs, false, inCorefile},
		{"theirs before the default block", theirs + stock, nil, theirs + stock, false, inCorefile},
		{"theirs and an earlier join's: ours removed", stock + theirs + stale, nil, stock + theirs, true, inCorefile},
		{"theirs without a port", stock + "clusterset.local {\n    forward . 10.0.0.5\n}\n", nil, stock + "clusterset.local {\n    forward . 10.0.0.5\n}\n", false, inCorefile},
		{"theirs fully qualified, dns://, upper case", stock + "dns://ClusterSet.Local.:53 {\n}\n", nil, stock + "dns://ClusterSet.Local.:53 {\n}\n", false, inCorefile},
		{"theirs among other zones of one block", stock + "example.org:53 clusterset.local:53 {\n}\n", nil, stock + "example.org:53 clusterset.local:53 {\n}\n", false, inCorefile},
		{"a subzone is another server", stock + "svc.clusterset.local:53 {\n}\n", nil, stock + "svc.clusterset.local:53 {\n}\n" + block, true, ""},
		{"another port is another server", stock + "clusterset.local:5353 {\n}\n", nil, stock + "clusterset.local:5353 {\n}\n" + block, true, ""},
		{"another transport is another server", stock + "tls://clusterset.local {\n}\n", nil, stock + "tls://clusterset.local {\n}\n" + block, true, ""},
		{"the zone in a comment or a plugin only", stock + "# clusterset.local:53 {\n.:5353 {\n    forward clusterset.local 10.0.0.5\n}\n", nil, stock + "# clusterset.local:53 {\n.:5353 {\n    forward clusterset.local 10.0.0.5\n}\n" + block, true, ""},
		{"theirs in coredns-custom (AKS): left alone", aks, map[string]string{"clusterset.server": theirs}, aks, false, inCustom},
		{"coredns-custom's and an earlier join's: ours removed", aks + stale, map[string]string{"clusterset.server": theirs}, aks, true, inCustom},
		{"an override of coredns-custom is no server block", aks, map[string]string{"clusterset.override": "forward clusterset.local 10.0.0.5\n"}, aks + block, true, ""},
		{"other server files of coredns-custom", aks, map[string]string{"example.server": "example.org:53 {\n}\n", "broken.server": "a {"}, aks + block, true, ""},
		{"a Corefile that does not parse here: appended as before", stock + "import /etc/coredns/custom.conf\n", nil, stock + "import /etc/coredns/custom.conf\n" + block, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, servedBy := withForward(tc.corefile, block, tc.custom)
			if got != tc.want || changed != tc.changed || servedBy != tc.servedBy {
				t.Errorf("withForward = %q, %v, %q; want %q, %v, %q", got, changed, servedBy, tc.want, tc.changed, tc.servedBy)
			}
		})
	}
}
