package nodeagent

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "1",
		"x$(A)y$(B)z":    "x1ytwoz",
		"$(C)":           "$(C)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"a$":             "a$",
		"$(A":            "$(A",
		"$x":             "$x",
		"--port=$(A)$$B": "--port=1$B",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "team", UID: "u1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "cluster-a-0"},
		Status:     corev1.PodStatus{PodIP: "10.1.0.2", PodIPs: []corev1.PodIP{{IP: "10.1.0.2"}, {IP: "fd00:10:1::2"}}},
	}
	field := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	c := &corev1.Container{Env: []corev1.EnvVar{
		{Name: "POD", ValueFrom: field("metadata.name")},
		{Name: "NS", ValueFrom: field("metadata.namespace")},
		{Name: "IP", ValueFrom: field("status.podIP")},
		{Name: "IPS", ValueFrom: field("status.podIPs")},
		{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "ADDR", Value: "$(IP):80"},
		{Name: "CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "k"}}},
	}}
	kube := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "team"}, Data: map[string]string{"k": "v"}})
	env, err := containerEnv(context.Background(), kube, pod, c, "web-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HOSTNAME=web-0", "POD=web-0", "NS=team", "IP=10.1.0.2", "IPS=10.1.0.2,fd00:10:1::2", "APP=web", "ADDR=10.1.0.2:80", "CM=v"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: field("spec.nope")}}
	if _, err := containerEnv(context.Background(), kube, pod, c, "web-0"); err == nil {
		t.Error("an unsupported fieldRef was accepted")
	}
	c.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Key: "k"}}}}
	if _, err := containerEnv(context.Background(), kube, pod, c, "web-0"); err == nil {
		t.Error("a missing Secret was accepted")
	}
}
