package workload

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"vksfleet.dev/fleet/test/env/nodeimages"
	"vksfleet.dev/fleet/test/env/poll"
)

// LoopPod is a pod that runs `serve loop` against target (host:port, resolved through the pod's DNS for every
// request), one TCP request every interval, for at most duration.
func LoopPod(name, namespace, target string, interval, duration time.Duration) *corev1.Pod {
	p := ClientPod(name, namespace)
	p.Spec.Containers[0].Command = []string{nodeimages.ServeBin, "loop", "-target", target, "-proto", "tcp",
		"-interval", interval.String(), "-timeout", "1s", "-duration", duration.String()}
	return p
}

// WithTimeout gives each request or question of a loop pod d instead of a second.
func WithTimeout(p *corev1.Pod, d time.Duration) *corev1.Pod {
	// The flag package takes the last -timeout.
	p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command, "-timeout", d.String())
	return p
}

// DNSLoopPod is a pod that runs `serve loop -proto dns`: it asks server (host:port) for the A records of names,
// each in turn, one UDP question every interval and no retry, for at most duration; a failure's reason is the
// answer's rcode (nxdomain, servfail, nodata, ...) or timeout. Request seq asks names[(seq-1) % len(names)].
func DNSLoopPod(name, namespace, server string, names []string, interval, duration time.Duration) *corev1.Pod {
	p := LoopPod(name, namespace, server, interval, duration)
	// The flag package takes the last -proto.
	p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command, "-proto", "dns", "-name", strings.Join(names, ","))
	return p
}

// Loop is a running loop pod whose requests are read from its log as they are made, through the API server and
// the kubelet, as `kubectl logs -f` does. When the log breaks off while the pod runs (its API server restarted or
// was unreachable for a while), the loop follows it again from where it was, for up to reconnectTimeout.
type Loop struct {
	// Name is the pod's.
	Name string

	pods corev1client.PodInterface
	mu   sync.Mutex
	reqs []Request // in the order they were made
	err  error     // why the log ended, once it has
}

// reconnectTimeout bounds how long a loop tries to follow a log that broke off again.
const reconnectTimeout = 5 * time.Minute

// StartLoop creates the loop pod and follows its log until ctx ends; it returns once the log is followed.
func StartLoop(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, timeout time.Duration) (*Loop, error) {
	pods := kube.CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	l := &Loop{Name: pod.Name, pods: pods}
	logs, _, err := l.follow(ctx, nil, timeout)
	if err != nil {
		return nil, fmt.Errorf("following loop %s: %w", pod.Name, err)
	}
	go l.read(ctx, logs)
	return l, nil
}

// follow opens the pod's log once its container runs, from since on when it is given, and says whether the
// container has ended (its log then ends with its last line).
func (l *Loop) follow(ctx context.Context, since *metav1.Time, timeout time.Duration) (logs io.ReadCloser, ended bool, err error) {
	err = poll.Until(ctx, poll.Interval, timeout, func() error {
		// Before its container runs, the API server answers a pod's log with nothing at all, not an error.
		p, err := l.pods.Get(ctx, l.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("pod %s is %s, its container not running yet", l.Name, p.Status.Phase)
		}
		st := p.Status.ContainerStatuses[0].State
		if st.Running == nil && st.Terminated == nil {
			return fmt.Errorf("pod %s is %s, its container not running yet", l.Name, p.Status.Phase)
		}
		ended = st.Terminated != nil
		logs, err = l.pods.GetLogs(l.Name, &corev1.PodLogOptions{Follow: true, SinceTime: since}).Stream(ctx)
		return err
	})
	return logs, ended, err
}

// read reads the log's requests as they come, and follows the log again when it breaks off while the container
// runs: from a second before the last request read, skipping the requests already read.
func (l *Loop) read(ctx context.Context, logs io.ReadCloser) {
	for {
		err := l.consume(logs)
		if ctx.Err() != nil {
			l.end(err)
			return
		}
		var since *metav1.Time
		l.mu.Lock()
		if n := len(l.reqs); n > 0 {
			since = &metav1.Time{Time: time.UnixMilli(l.reqs[n-1].StartMs).Add(-time.Second)}
		}
		l.mu.Unlock()
		next, ended, ferr := l.follow(ctx, since, reconnectTimeout)
		switch {
		case ferr != nil:
			l.end(errors.Join(err, ferr))
			return
		case ended:
			l.end(l.consume(next))
			return
		}
		logs = next
	}
}

// consume reads the requests of a log until it ends, and says why it ended.
func (l *Loop) consume(logs io.ReadCloser) error {
	defer logs.Close()
	lines := bufio.NewScanner(logs)
	for lines.Scan() {
		reqs := ParseLoop(lines.Text())
		l.mu.Lock()
		for _, r := range reqs {
			if n := len(l.reqs); n == 0 || r.Seq > l.reqs[n-1].Seq {
				l.reqs = append(l.reqs, r)
			}
		}
		l.mu.Unlock()
	}
	return cmp.Or(lines.Err(), io.EOF)
}

// end records why the log is no longer followed.
func (l *Loop) end(err error) {
	l.mu.Lock()
	l.err = fmt.Errorf("the log of %s ended: %w", l.Name, err)
	l.mu.Unlock()
}

// Requests returns the requests that started in [from, to), in unix milliseconds; to 0 is no bound.
func (l *Loop) Requests(from, to int64) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	var in []Request
	for _, r := range l.reqs {
		if r.StartMs >= from && (to == 0 || r.StartMs < to) {
			in = append(in, r)
		}
	}
	return in
}

// Reported says whether every request that started before ms has been read. The loop makes one request at a
// time and writes each line when the request ends, so a request that started at ms or later vouches for all
// before it; so does the end of the log.
func (l *Loop) Reported(ms int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil || len(l.reqs) > 0 && l.reqs[len(l.reqs)-1].StartMs >= ms
}

// Settled returns the requests that started in [from, to) once every one of them is reported, waiting at most
// timeout.
func (l *Loop) Settled(ctx context.Context, from, to int64, timeout time.Duration) ([]Request, error) {
	err := poll.Until(ctx, poll.Interval, timeout, func() error {
		if !l.Reported(to) {
			return fmt.Errorf("loop %s has not reported every request that started before %d yet", l.Name, to)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l.Requests(from, to), nil
}

// Err is why the log ended, nil while it is followed.
func (l *Loop) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// LongestGap is the longest time between the starts of two answered requests in a row (the loop's interval when
// none failed), or from the first request to the first answered one.
func LongestGap(reqs []Request) time.Duration {
	var longest int64
	prev := int64(-1)
	for _, r := range reqs {
		if prev < 0 {
			prev = r.StartMs
		}
		if r.OK {
			longest = max(longest, r.StartMs-prev)
			prev = r.StartMs
		}
	}
	return time.Duration(longest) * time.Millisecond
}

// Failover measures a move of traffic in reqs: from the last success of the old place (old) before the first
// success of the new place (new) to that first success, in milliseconds, and the requests that failed in
// between. ok is false while the new place has not answered.
func Failover(reqs []Request, old, new func(Request) bool) (gapMs int64, failed int, ok bool) {
	first := -1
	for i, r := range reqs {
		if r.OK && new(r) {
			first = i
			break
		}
	}
	if first < 0 {
		return 0, 0, false
	}
	last := -1
	for i := first - 1; i >= 0; i-- {
		if reqs[i].OK && old(reqs[i]) {
			last = i
			break
		}
	}
	from := reqs[0].StartMs
	if last >= 0 {
		from = reqs[last].StartMs
	}
	for _, r := range reqs[last+1 : first] {
		if !r.OK {
			failed++
		}
	}
	return reqs[first].StartMs - from, failed, true
}
