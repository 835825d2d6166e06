package controller

import "testing"

func TestResourceOf(t *testing.T) {
	cases := map[string]string{
		"/api/v1/namespaces":                                                          "namespaces",
		"/api/v1/namespaces/ns":                                                       "namespaces",
		"/api/v1/namespaces/ns/services":                                              "services",
		"/api/v1/namespaces/ns/services/web":                                          "services",
		"/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-abc":              "endpointslices",
		"/apis/multicluster.x-k8s.io/v1beta1/namespaces/ns/serviceimports/web/status": "serviceimports",
		"/apis/about.k8s.io/v1alpha1/clusterproperties":                               "clusterproperties",
		"/healthz": "other",
	}
	for path, want := range cases {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
