package controller

import (
	"testing"
)

func TestBrokerScopeCache(t *testing.T) {
	all := brokerScope{all: true}.cacheOptions()
	if all.DefaultNamespaces != nil || all.DefaultLabelSelector == nil {
		t.Errorf("cluster-wide scope: namespaces %v, selector %v", all.DefaultNamespaces, all.DefaultLabelSelector)
	}
	some := brokerScope{namespaces: []string{"mcs-member-a-1", "mcs-member-b-2"}}.cacheOptions()
	if len(some.DefaultNamespaces) != 2 || some.DefaultLabelSelector == nil {
		t.Errorf("namespaced scope: namespaces %v, selector %v", some.DefaultNamespaces, some.DefaultLabelSelector)
	}
	for _, tt := range []struct {
		a, b brokerScope
		want bool
	}{
		{brokerScope{all: true}, brokerScope{all: true}, true},
		{brokerScope{all: true}, brokerScope{namespaces: []string{"x"}}, false},
		{brokerScope{namespaces: []string{"x"}}, brokerScope{namespaces: []string{"x"}}, true},
		{brokerScope{namespaces: []string{"x"}}, brokerScope{namespaces: []string{"x", "y"}}, false},
	} {
		if got := tt.a.equal(tt.b); got != tt.want {
			t.Errorf("%v equal %v = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}
