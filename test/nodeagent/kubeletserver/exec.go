package kubeletserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// TerminalSize is a client terminal's size in characters. It is the
// streaming library's type, aliased so the agent need not import it.
type TerminalSize = remotecommand.TerminalSize

// ExitError is what Runtime.Exec returns for a command that exited with a
// non-zero code: the streaming library recognises this type
// (k8s.io/utils/exec.CodeExitError) and sends the code to the client, where
// client-go's remotecommand returns a k8s.io/client-go/util/exec.CodeExitError
// and kubectl exits with the same code.
func ExitError(code int) error {
	return utilexec.CodeExitError{Err: fmt.Errorf("exit status %d", code), Code: code}
}

func (s *Server) serveExec(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "missing command", http.StatusBadRequest)
		return
	}
	if err := s.rt.CheckExec(ns, pod, container); err != nil {
		writeRuntimeError(w, err)
		return
	}
	ex := &executor{rt: s.rt, namespace: ns, opts: opts}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		s.serveExecV5(w, r, ex, pod, container, cmd)
		return
	}
	// SPDY v1-v4 and WebSocket up to v4, as served behind the kubelet.
	remotecommand.ServeExec(w, r, ex, pod, "", container, cmd, opts,
		s.opts.StreamIdleTimeout, s.opts.StreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// executor adapts the Runtime to the streaming library for one request.
type executor struct {
	rt        Runtime
	namespace string
	opts      *remotecommand.Options
}

// ExecInContainer implements remotecommand.Executor.
func (e *executor) ExecInContainer(ctx context.Context, pod, _, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan TerminalSize, _ time.Duration) error {
	// The WebSocket transports hand over placeholders for the streams the
	// client did not ask for, and a resize channel even without a tty; the
	// Runtime is promised nil for those.
	if !e.opts.Stdin {
		in = nil
	}
	if !e.opts.Stdout {
		out = nil
	}
	if !e.opts.Stderr {
		errOut = nil
	}
	if !tty {
		resize = nil
	}
	err := e.rt.Exec(ctx, e.namespace, pod, container, cmd, in, out, errOut, tty, resize)
	// ServeExec spots an exit code by a type assertion only, so a wrapped
	// one would reach kubectl as an internal error.
	if exitErr, ok := errors.AsType[utilexec.ExitError](err); ok {
		return exitErr
	}
	return err
}

// serveExecV5 speaks v5.channel.k8s.io, the only protocol client-go's
// WebSocket executor offers. The streaming library's WebSocket server stops
// at v4; the kubelet bridges v5 to it through the kube-apiserver's stream
// translator, at the price of a second connection and module. v5 is v4 plus
// a close signal for stdin, which wsstream implements, so only the channel
// layout and the final status are written here, after the kube-apiserver's
// own v5 server.
func (s *Server) serveExecV5(w http.ResponseWriter, r *http.Request, ex *executor, pod, container string, cmd []string) {
	opts := ex.opts
	channel := func(wanted bool, t wsstream.ChannelType) wsstream.ChannelType {
		if wanted {
			return t
		}
		return wsstream.IgnoreChannel
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommand.StreamProtocolV5Name: {Binary: true, Channels: []wsstream.ChannelType{
			remotecommand.StreamStdIn:  channel(opts.Stdin, wsstream.ReadChannel),
			remotecommand.StreamStdOut: channel(opts.Stdout, wsstream.WriteChannel),
			remotecommand.StreamStdErr: channel(opts.Stderr, wsstream.WriteChannel),
			remotecommand.StreamErr:    wsstream.WriteChannel,
			remotecommand.StreamResize: wsstream.ReadChannel,
		}},
	})
	conn.SetIdleTimeout(s.opts.StreamIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return // Open has answered the client.
	}
	defer conn.Close()

	// An empty frame on the first writable channel tells clients that the
	// session is up, as the kube-apiserver and the kubelet do.
	first := remotecommand.StreamErr
	switch {
	case opts.Stdout:
		first = remotecommand.StreamStdOut
	case opts.Stderr:
		first = remotecommand.StreamStdErr
	}
	if _, err := streams[first].Write(nil); err != nil {
		return
	}

	var resize chan TerminalSize
	if opts.TTY {
		resize = make(chan TerminalSize)
		go decodeResizes(r.Context(), streams[remotecommand.StreamResize], resize)
	}
	err = ex.ExecInContainer(r.Context(), pod, "", container, cmd,
		streams[remotecommand.StreamStdIn], streams[remotecommand.StreamStdOut], streams[remotecommand.StreamStdErr],
		opts.TTY, resize, 0)
	status, _ := json.Marshal(execStatus(err))
	_, _ = streams[remotecommand.StreamErr].Write(status)
}

// decodeResizes forwards the sizes the client sends, JSON-encoded, until it
// stops or the request ends, and then closes sizes as the library does.
func decodeResizes(ctx context.Context, r io.Reader, sizes chan<- TerminalSize) {
	defer close(sizes)
	d := json.NewDecoder(r)
	for {
		var size TerminalSize
		if d.Decode(&size) != nil {
			return
		}
		select {
		case sizes <- size:
		case <-ctx.Done():
			return
		}
	}
}

// execStatus is the final v4/v5 status for err, the same as the streaming
// library sends over SPDY.
func execStatus(err error) metav1.Status {
	if err == nil {
		return metav1.Status{Status: metav1.StatusSuccess}
	}
	if exitErr, ok := errors.AsType[utilexec.ExitError](err); ok && exitErr.Exited() {
		return metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exitErr),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type:    remotecommand.ExitCodeCauseType,
				Message: strconv.Itoa(exitErr.ExitStatus()),
			}}},
		}
	}
	return apierrors.NewInternalError(fmt.Errorf("error executing command in container: %w", err)).ErrStatus
}
