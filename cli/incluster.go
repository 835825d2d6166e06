package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"

	"vksfleet.dev/fleet/build/deploy"
)

// The --in-cluster probe's pod: where it runs and how long it may take to start (an image pull included).
const (
	probeNamespace  = metav1.NamespaceDefault
	probeContainer  = "dig"
	podStartTimeout = 2 * time.Minute
	// probeDeadline ends the pod on its own should kubectl-mcs die before deleting it.
	probeDeadline = 10 * time.Minute
)

// defaultProbeImage is the --image default: our mcs-controller image at this plugin's version (deploy's), which
// holds kubectl-mcs, whose hidden command dns-probe the pod runs. "" only if the embedded bases name no
// controller image, which build/deploy's tests rule out.
var defaultProbeImage, _ = deploy.ControllerImage()

// probeBinary is kubectl-mcs in our mcs-controller image.
const probeBinary = "/kubectl-mcs"

// ownImage says whether image is our mcs-controller's, from any registry or mirror, at any tag: the probe pod then
// runs its kubectl-mcs, and any other image must have sleep and dig.
func ownImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name == "mcs-controller" || strings.HasSuffix(name, "/mcs-controller")
}

// inClusterSource is Member.DNSSource for the --in-cluster probe, and inClusterAddress its Member.DNS.
const (
	inClusterSource  = "--in-cluster"
	inClusterAddress = "the resolver of a pod in namespace " + probeNamespace
)

// podResolver asks the member's DNS from inside it, as its pods do: a short-lived pod of image asks, through the
// API server as kubectl exec does, the pod's own resolver (the cluster's DNS Service): our image with kubectl-mcs
// dns-probe, any other with dig. The pod is deleted afterwards. It is how a machine outside the cluster sees what
// the cluster's pods see.
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
		if ownImage(image) {
			out, err := execInPod(ctx, cfg, cs, pod, probeAskCommand(qs))
			if err != nil {
				return nil, fmt.Errorf("running %s dns-probe in pod %s/%s: %w", probeBinary, pod.Namespace, pod.Name, err)
			}
			answers := map[string]DNSAnswer{}
			if err := json.Unmarshal([]byte(out), &answers); err != nil {
				return nil, fmt.Errorf("%s dns-probe in pod %s/%s: %w", probeBinary, pod.Namespace, pod.Name, err)
			}
			for _, q := range qs {
				if _, ok := answers[q.key()]; !ok {
					answers[q.key()] = DNSAnswer{Error: fmt.Sprintf("no answer in pod %s/%s", pod.Namespace, pod.Name)}
				}
			}
			return answers, nil
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

// probePod is the probe's pod: it waits until deleted, and meets the restricted Pod Security Standard so that
// it may run in a namespace that enforces it.
func probePod(image string) *corev1.Pod {
	wait := []string{"sleep", fmt.Sprint(int(probeDeadline / time.Second))}
	if ownImage(image) {
		wait = []string{probeBinary, "dns-probe", "wait", probeDeadline.String()}
	}
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
				Name: probeContainer, Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Command: wait,
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
		return fmt.Errorf("probe pod %s/%s not running after %s (%s): can the node pull %s, and has it %s or dig?",
			pod.Namespace, pod.Name, podStartTimeout, waitingReason(last), pod.Spec.Containers[0].Image, probeBinary)
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

// probeAskCommand asks every question with our image's kubectl-mcs dns-probe, which prints the answers as JSON.
func probeAskCommand(qs []query) []string {
	cmd := []string{probeBinary, "dns-probe", "ask"}
	for _, q := range qs {
		cmd = append(cmd, q.name, dns.TypeToString[q.qtype])
	}
	return cmd
}

// dnsProbeCommand is the probe pod's side, hidden: kubectl-mcs in our mcs-controller image runs `dns-probe wait
// DURATION` as the pod's process, which ends early when the pod is deleted (SIGTERM), and `dns-probe ask NAME TYPE
// ...` through exec, which asks the pod's DNS server (the first of resolvConf) as the plugin asks a member's DNS
// from outside, and prints the answers as JSON, by question.
func (o *options) dnsProbeCommand() *cobra.Command {
	resolvConf := "/etc/resolv.conf"
	cmd := &cobra.Command{Use: "dns-probe", Hidden: true, Short: "The --in-cluster probe's side, in its pod"}
	cmd.PersistentFlags().StringVar(&resolvConf, "resolv-conf", resolvConf, "the resolver configuration whose first server is asked")
	cmd.AddCommand(&cobra.Command{
		Use: "wait DURATION", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := time.ParseDuration(args[0])
			if err != nil {
				return err
			}
			select {
			case <-cmd.Context().Done():
			case <-time.After(d):
			}
			return nil
		},
	}, &cobra.Command{
		Use: "ask NAME TYPE [NAME TYPE]...", Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			conf, err := dns.ClientConfigFromFile(resolvConf)
			if err != nil {
				return err
			}
			if len(conf.Servers) == 0 {
				return fmt.Errorf("%s names no nameserver", resolvConf)
			}
			return probeAsk(cmd.Context(), net.JoinHostPort(conf.Servers[0], conf.Port), args, o.streams.Out)
		},
	})
	return cmd
}

// probeAsk asks the DNS server at addr the questions args name (parseQuestions), and writes the answers as JSON,
// by question (query.key), which podResolver reads.
func probeAsk(ctx context.Context, addr string, args []string, w io.Writer) error {
	qs, err := parseQuestions(args)
	if err != nil {
		return err
	}
	answers, err := addressResolver(addr)(ctx, qs)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(answers)
}

// parseQuestions reads dns-probe ask's arguments: pairs of a name, made fully qualified, and a type.
func parseQuestions(args []string) ([]query, error) {
	if len(args)%2 != 0 {
		return nil, fmt.Errorf("%d arguments: want pairs of a name and a type", len(args))
	}
	var qs []query
	for i := 0; i < len(args); i += 2 {
		t, ok := dns.StringToType[strings.ToUpper(args[i+1])]
		if !ok {
			return nil, fmt.Errorf("%q is no DNS type", args[i+1])
		}
		qs = append(qs, query{dns.Fqdn(strings.ToLower(args[i])), t})
	}
	return qs, nil
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
