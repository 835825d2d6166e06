package mcsctl

import (
	"slices"
	"testing"
)

func TestSelectContexts(t *testing.T) {
	all := []string{"broker", "cluster-b", "cluster-a", "hub"}
	cases := []struct {
		name        string
		members     []string
		broker      string
		wantMembers []string
		wantBroker  string
		wantErr     bool
	}{
		{name: "every context but the default broker", wantMembers: []string{"cluster-a", "cluster-b", "hub"}, wantBroker: "broker"},
		{name: "explicit broker", broker: "hub", wantMembers: []string{"broker", "cluster-a", "cluster-b"}, wantBroker: "hub"},
		{name: "explicit members, sorted", members: []string{"cluster-b", "cluster-a", "cluster-b"}, wantMembers: []string{"cluster-a", "cluster-b"}, wantBroker: "broker"},
		{name: "unknown member", members: []string{"cluster-x"}, wantErr: true},
		{name: "unknown broker", broker: "nope", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			members, broker, err := selectContexts(all, c.members, c.broker)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want error %v", err, c.wantErr)
			}
			if !slices.Equal(members, c.wantMembers) || broker != c.wantBroker {
				t.Errorf("got %v, %q; want %v, %q", members, broker, c.wantMembers, c.wantBroker)
			}
		})
	}
	if _, broker, err := selectContexts([]string{"a", "b"}, nil, ""); err != nil || broker != "" {
		t.Errorf("no broker context: %q, %v; want none and no error", broker, err)
	}
}

func TestParseDNSFlags(t *testing.T) {
	got, err := parseDNSFlags([]string{"cluster-a=127.0.0.1:5353"}, []string{"cluster-a"})
	if err != nil || got["cluster-a"] != "127.0.0.1:5353" {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"cluster-a", "=1.2.3.4:53", "cluster-z=1.2.3.4:53"} {
		if _, err := parseDNSFlags([]string{bad}, []string{"cluster-a"}); err == nil {
			t.Errorf("--dns %q accepted", bad)
		}
	}
	if dnsEnv("cluster-a") != "FLEET_DNS_CLUSTER_A" {
		t.Errorf("dnsEnv = %q", dnsEnv("cluster-a"))
	}
}
