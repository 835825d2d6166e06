package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"
)

// The --in-cluster probe's pod: where it runs and how long it may take to start (an image pull included).
const (
	probeNamespace  = metav1.NamespaceDefault
	probeContainer  = "dig"
	podStartTimeout = 2 * time.Minute
	// probeDeadline ends the pod on its own should kubectl-mcs die before deleting it.
	probeDeadline = 10 * time.Minute
)

// defaultProbeImage is the --image default: the project's test client image, which has dig.
const defaultProbeImage = "vksfleet.dev/client"

// inClusterSource is Member.DNSSource for the --in-cluster probe, and inClusterAddress its Member.DNS.
const (
	inClusterSource  = "--in-cluster"
	inClusterAddress = "the resolver of a pod in namespace " + probeNamespace
)

// podResolver asks the member's DNS from inside it, as its pods do: a short-lived pod of image runs dig, through
// the API server as kubectl exec does, against the pod's own resolver (the cluster's DNS Service); the pod is
// deleted afterwards. It is how a machine outside the cluster sees what the cluster's pods see.
func podResolver(cfg *rest.Config, image string) resolver {
	return func(ctx context.Context, qs []query) (map[string]DNSAnswer, error) {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		pod, err := cs.CoreV1().Pods(probeNamespace).Create(ctx, probePod(image), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating the probe pod in namespace %s: %w", probeNamespace, err)
		}
		defer func() {
			// The command's context may be done; the pod must go all the same.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}()
		if err := waitRunning(ctx, cs, pod); err != nil {
			return nil, err
		}
		out, err := execInPod(ctx, cfg, cs, pod, digCommand(qs))
		if out == "" && err != nil {
			return nil, fmt.Errorf("running dig in pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		// dig exits non-zero when some question got no answer: those get the error, the others their answers.
		answers := parseDig(out)
		for _, q := range qs {
			if _, ok := answers[q.key()]; !ok {
				answers[q.key()] = DNSAnswer{Error: fmt.Sprintf("no answer in pod %s/%s: %v", pod.Namespace, pod.Name, digErrors(out, err))}
			}
		}
		return answers, nil
	}
}

// probePod is the probe's pod: it sleeps until deleted, and meets the restricted Pod Security Standard so that
// it may run in a namespace that enforces it.
func probePod(image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubectl-mcs-dns-", Namespace: probeNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": "kubectl-mcs", "app.kubernetes.io/component": "dns-probe"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr.To(int64(probeDeadline / time.Second)),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: probeContainer, Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sleep", fmt.Sprint(int(probeDeadline / time.Second))},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

func waitRunning(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) error {
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podStartTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		switch p.Status.Phase {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("probe pod %s/%s ended (%s): %s", p.Namespace, p.Name, p.Status.Phase, p.Status.Message)
		}
		return false, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("probe pod %s/%s not running after %s (%s): does --image exist and has it dig?", pod.Namespace, pod.Name, podStartTimeout, waitingReason(last))
	}
	return err
}

// waitingReason is why the pod's container waits (ErrImagePull, say), or its phase.
func waitingReason(p *corev1.Pod) string {
	if p == nil {
		return "never seen"
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			return s.State.Waiting.Reason + ": " + s.State.Waiting.Message
		}
	}
	return string(p.Status.Phase)
}

// execInPod runs command in the probe's container and returns its standard output. It streams over WebSocket,
// falling back to SPDY for API servers without it, as kubectl exec does.
func execInPod(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, pod *corev1.Pod, command []string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: probeContainer, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil && stderr.Len() > 0 {
		err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), err
}

// digCommand asks every question in one dig run. +question prints each answered question, which is how
// parseDig matches answers to questions; one that gets no answer prints none.
func digCommand(qs []query) []string {
	cmd := []string{"dig", "+noall", "+comments", "+question", "+answer", "+time=2", "+tries=2"}
	for _, q := range qs {
		cmd = append(cmd, q.name, dns.TypeToString[q.qtype])
	}
	return cmd
}

// parseDig reads dig's output (digCommand's options) into answers by question: each answer starts with its
// header line, which has the status, then its question line (";name. IN TYPE"), then its records.
func parseDig(out string) map[string]DNSAnswer {
	answers := map[string]DNSAnswer{}
	rcode, current := "", ""
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.Contains(line, "->>HEADER<<-"):
			_, status, _ := strings.Cut(line, "status: ")
			rcode, _, _ = strings.Cut(status, ",")
			current = ""
		case line == "" || strings.HasPrefix(line, ";;"):
		case strings.HasPrefix(line, ";"):
			f := strings.Fields(line[1:])
			if len(f) == 3 && f[1] == "IN" && dns.StringToType[f[2]] != 0 && rcode != "" {
				current = query{strings.ToLower(f[0]), dns.StringToType[f[2]]}.key()
				answers[current] = DNSAnswer{Rcode: rcode}
				rcode = ""
			}
		case current != "":
			if rr, err := dns.NewRR(line); err == nil && rr != nil {
				a := answers[current]
				a.add(rr)
				answers[current] = a
			}
		}
	}
	return answers
}

// digErrors are dig's own error lines (";; communications error ..."), else the exec error.
func digErrors(out string, err error) string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "error") || strings.Contains(line, "timed out") || strings.Contains(line, "no servers") {
			lines = append(lines, strings.TrimSpace(strings.TrimLeft(line, "; ")))
		}
	}
	if len(lines) == 0 && err != nil {
		return err.Error()
	}
	if len(lines) == 0 {
		return "dig printed no answer"
	}
	return strings.Join(lines, "; ")
}
