package nodeagent

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// containerEnv builds a container's environment the way the kubelet does, for the sources a test workload uses:
// literal values with $(VAR) references to earlier variables, the downward API's fieldRef, and ConfigMap or
// Secret keys. PATH is the agent's own, since the container runs the machine's binaries; HOSTNAME is the pod's.
func containerEnv(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, c *corev1.Container, hostname string) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	set("PATH", os.Getenv("PATH"))
	set("HOSTNAME", hostname)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			v, ok := "", false
			if err == nil {
				v, ok = cm.Data[ref.Key]
			}
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				return nil, fmt.Errorf("env %s: key %q of ConfigMap %s: %v", e.Name, ref.Key, ref.Name, orMissing(err))
			}
			set(e.Name, v)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := kube.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			var v []byte
			ok := false
			if err == nil {
				v, ok = s.Data[ref.Key]
			}
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				return nil, fmt.Errorf("env %s: key %q of Secret %s: %v", e.Name, ref.Key, ref.Name, orMissing(err))
			}
			set(e.Name, string(v))
		default:
			return nil, fmt.Errorf("env %s: this node agent supports value, fieldRef, configMapKeyRef and secretKeyRef", e.Name)
		}
	}
	env := make([]string, len(order))
	for i, k := range order {
		env[i] = k + "=" + vars[k]
	}
	return env, nil
}

func orMissing(err error) error {
	if err == nil {
		return fmt.Errorf("no such key")
	}
	return err
}

// fieldValue resolves a downward-API field path.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		ips := make([]string, len(pod.Status.PodIPs))
		for i, ip := range pod.Status.PodIPs {
			ips[i] = ip.IP
		}
		return strings.Join(ips, ","), nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		ips := make([]string, len(pod.Status.HostIPs))
		for i, ip := range pod.Status.HostIPs {
			ips[i] = ip.IP
		}
		return strings.Join(ips, ","), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if key, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(key, "']") {
			return m[strings.TrimSuffix(key, "']")], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// expand replaces $(VAR) with the value of VAR when it is defined, leaves an undefined reference as written, and
// turns $$ into $, as Kubernetes does for env values, command and args.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envMap turns KEY=VALUE pairs back into a map, for expanding command and args.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
