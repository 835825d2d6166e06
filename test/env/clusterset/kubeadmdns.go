package clusterset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeadmCorefile is kubeadm's default Corefile, as kubeadm writes it into the ConfigMap kube-system/coredns.
const KubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`

// InstallKubeadmDNS creates what kubeadm creates for a cluster's DNS beside the kube-dns Service: the
// ServiceAccount, ClusterRole and binding system:coredns, the ConfigMap with KubeadmCorefile, and the Deployment
// coredns running image. Objects that exist are left as they are. On kubelet nodes the image must be one they
// hold: our CoreDNS image is stock CoreDNS with one plugin more, which this Corefile does not load, so it serves
// as kubeadm's own image would.
func InstallKubeadmDNS(ctx context.Context, c client.Client, image string) error {
	labels := map[string]string{"k8s-app": "kube-dns"}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: metav1.NamespaceSystem}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns"}, Data: map[string]string{"Corefile": KubeadmCorefile}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "coredns", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: "coredns",
				DNSPolicy:          corev1.DNSDefault,
				Containers: []corev1.Container{{
					Name: "coredns", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"-conf", "/etc/coredns/Corefile"},
					Ports: []corev1.ContainerPort{
						{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
						{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}}},
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
						Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
					},
					VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
				}},
				Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
					Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
				}}}},
			}},
		}}
	for _, o := range []client.Object{sa, role, binding, cm, d} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating kubeadm's DNS: %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
