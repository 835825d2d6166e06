// Package workload holds the pods that traffic tests and the demo run on the local clusterset's data plane: serve
// (test/env/cmd/serve) as a Deployment or StatefulSet behind a Service, a client pod to exec into, and the parser of
// the serve loop's per-request lines.
package workload

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/test/env/nodeimages"
)

// Ports serve listens on in its pods, and the Service ports in front of them.
const (
	EchoPort    = 7000 // TCP and UDP echo
	HTTPPort    = 8080 // HTTP in the pod
	ServicePort = 80   // HTTP on the Service
)

// ServePod is the pod template of serve: it answers with the cluster name given here and its pod name, and is
// Ready once its HTTP health check answers. Its image, like ClientPod's, is never pulled: every node has it from
// test/env/nodeimages.
func ServePod(app, cluster string) corev1.PodTemplateSpec {
	labels := map[string]string{"app": app}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{
				Name: "serve", Image: "vksfleet.dev/serve", ImagePullPolicy: corev1.PullNever, Command: []string{nodeimages.ServeBin},
				Env: []corev1.EnvVar{
					{Name: "CLUSTER", Value: cluster},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				Ports: []corev1.ContainerPort{
					{Name: "tcp", ContainerPort: EchoPort, Protocol: corev1.ProtocolTCP},
					{Name: "udp", ContainerPort: EchoPort, Protocol: corev1.ProtocolUDP},
					{Name: "http", ContainerPort: HTTPPort, Protocol: corev1.ProtocolTCP},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// SocatPod is an echo pod as users often write one: a shell that execs socat, answering the loop's TCP requests
// on EchoPort as serve does, ready once the port accepts, and gone the moment it gets SIGTERM, with no drain.
func SocatPod(app, cluster string) corev1.PodTemplateSpec {
	script := fmt.Sprintf(`exec socat TCP-LISTEN:%d,fork,reuseaddr "SYSTEM:read l; echo cluster=$CLUSTER pod=$POD_NAME echo=\$l"`, EchoPort)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []corev1.Container{{
				Name: "socat", Image: nodeimages.Socat, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", script},
				Env: []corev1.EnvVar{
					{Name: "CLUSTER", Value: cluster},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				Ports: []corev1.ContainerPort{{Name: "tcp", ContainerPort: EchoPort, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("tcp")}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// ServiceFor is the Service in front of app's pods: TCP and UDP echo on EchoPort, HTTP on ServicePort; headless
// with no cluster IP.
func ServiceFor(app, namespace string, headless bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: EchoPort, TargetPort: intstr.FromString("tcp")},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: EchoPort, TargetPort: intstr.FromString("udp")},
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: ServicePort, TargetPort: intstr.FromString("http")},
		}},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return svc
}

// Deploy creates app's Service and its serve pods in one cluster: a Deployment, or a StatefulSet whose pods get
// stable hostnames when headless.
func Deploy(ctx context.Context, c client.Client, namespace, app, cluster string, replicas int32, headless bool) error {
	tmpl := ServePod(app, cluster)
	sel := &metav1.LabelSelector{MatchLabels: tmpl.Labels}
	var w client.Object = &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: sel, Template: tmpl},
	}
	if headless {
		w = &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: namespace},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), ServiceName: app, Selector: sel, Template: tmpl,
				PodManagementPolicy: appsv1.ParallelPodManagement},
		}
	}
	for _, o := range []client.Object{ServiceFor(app, namespace, headless), w} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, namespace, o.GetName(), err)
		}
	}
	return nil
}

// DeployPlaced creates app's serve pods in one cluster, one per placement: a zone of the cluster, where a Deployment
// of its own pins it (<app>-z<i> for the i-th placement), or "" for anywhere (the Deployment <app>). Each
// Deployment selects its own pod (label part=<its name>), while a Service of app selects them all. It returns the
// Deployments' names, in the placements' order; the Service is the caller's.
func DeployPlaced(ctx context.Context, c client.Client, namespace, app, cluster string, placements ...string) ([]string, error) {
	var names []string
	for i, zone := range placements {
		tmpl := ServePod(app, cluster)
		name := app
		if zone != "" {
			tmpl.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: zone}
			name = fmt.Sprintf("%s-z%d", app, i)
		}
		// The Service selects app=<app>; each Deployment needs a selector of its own, or they would share pods.
		tmpl.Labels["part"] = name
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: tmpl,
				Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}},
		}
		if err := c.Create(ctx, d); err != nil {
			return names, fmt.Errorf("creating Deployment %s/%s: %w", namespace, name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

// Scale sets the replicas of a Deployment.
func Scale(ctx context.Context, c client.Client, namespace, name string, replicas int32) error {
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
		return err
	}
	d.Spec.Replicas = ptr.To(replicas)
	return c.Update(ctx, d)
}

// PodReady says whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// ReadyPodIPs returns the addresses of the pods with the labels in namespace that are ready and not terminating,
// sorted.
func ReadyPodIPs(ctx context.Context, c client.Client, namespace string, labels client.MatchingLabels) ([]string, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), labels); err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if PodReady(&p) && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	slices.Sort(ips)
	return ips, nil
}

// ClientPod is a pod that only waits, for tests to exec into; it ends by itself after an hour at most.
func ClientPod(name, namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "client", Image: "vksfleet.dev/client", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"}}},
		},
	}
}

// Kubectl runs `kubectl --kubeconfig K --context C args...` and returns its stdout, stderr and exit code; err is
// set only when kubectl could not run at all.
func Kubectl(ctx context.Context, kubectl, kubeconfig, context string, args ...string) (stdout, stderr string, code int, err error) {
	var o, e strings.Builder
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "--context", context}, args...)...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode(), nil
	}
	return o.String(), e.String(), 0, err
}

// Request is one line of the serve loop's output.
type Request struct {
	Seq     int
	StartMs int64
	OK      bool
	// Cluster and Pod answered the request; Reason says why it failed, and Addr where it was sent (empty when
	// the failure came before the name was looked up, or from a loop that does not say).
	Cluster, Pod, Reason, Addr string
	LatencyMs                  float64
}

// AnsweredBy counts the answered requests by key, such as the cluster or the pod that answered.
func AnsweredBy(reqs []Request, key func(Request) string) map[string]int {
	by := map[string]int{}
	for _, r := range reqs {
		if r.OK {
			by[key(r)]++
		}
	}
	return by
}

// ByCluster keys AnsweredBy by the cluster that answered.
func ByCluster(r Request) string { return r.Cluster }

// Failures describes the failed requests of reqs, "#seq reason" each.
func Failures(reqs []Request) []string {
	var f []string
	for _, r := range reqs {
		if !r.OK {
			f = append(f, fmt.Sprintf("#%d %s", r.Seq, r.Reason))
		}
	}
	return f
}

// ParseLoop reads the serve loop's output (see test/env/cmd/serve) into its requests, ignoring the summary and any
// line that is not a request.
func ParseLoop(out string) []Request {
	var reqs []Request
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		seq, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		r := Request{Seq: seq, StartMs: start}
		switch {
		case f[2] == "ok" && len(f) == 6:
			r.OK, r.Cluster, r.Pod = true, f[3], f[4]
			r.LatencyMs, _ = strconv.ParseFloat(f[5], 64)
		case f[2] == "fail":
			r.Reason = f[3]
			r.LatencyMs, _ = strconv.ParseFloat(f[4], 64)
			if len(f) > 5 && f[5] != "-" {
				r.Addr = f[5]
			}
		default:
			continue
		}
		reqs = append(reqs, r)
	}
	return reqs
}
