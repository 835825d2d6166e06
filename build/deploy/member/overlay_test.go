package member

import (
	"testing"

	"vksfleet.dev/fleet/mcs/names"
)

func TestKustomization(t *testing.T) {
	got := Kustomization("../../build/deploy/member", "east.prod", "-east")
	want := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" +
		"namespace: \"" + names.BrokerNamespace("east.prod") + "\"\nnameSuffix: \"-east\"\n" +
		"resources:\n  - \"../../build/deploy/member\"\n"
	if got != want {
		t.Errorf("Kustomization =\n%s\nwant\n%s", got, want)
	}
}
