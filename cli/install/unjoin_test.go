package install

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// TestUnjoinUnreachable: unjoin stops before it changes anything, with ErrMemberUnreachable, when the member's
// API server cannot be reached; an API server that answers, even with a refusal, is reachable.
func TestUnjoinUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	refusing := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`))
	}))
	defer refusing.Close()
	// The broker is never reached in either case: the member's answer comes first.
	info := BrokerInfo{Server: closed, ClusterSet: "prod", Token: "t"}
	for _, tc := range []struct {
		name        string
		cfg         *rest.Config
		unreachable bool
	}{
		{"connection refused", &rest.Config{Host: closed, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, true},
		{"answers 401", &rest.Config{Host: refusing.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := Unjoin(context.Background(), tc.cfg, info, UnjoinOptions{ClusterID: "cluster-a", Wait: time.Second}, &out)
			if err == nil {
				t.Fatalf("unjoin succeeded:\n%s", out.String())
			}
			if got := errors.Is(err, ErrMemberUnreachable); got != tc.unreachable {
				t.Errorf("unjoin: %v; ErrMemberUnreachable %v, want %v", err, got, tc.unreachable)
			}
			if tc.unreachable && out.String() != "FAIL  member reachable\n" {
				t.Errorf("unjoin went on after the member did not answer:\n%s", out.String())
			}
		})
	}
}

func TestUnanswered(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{apierrors.NewUnauthorized("no"), false},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "version"}, "", errors.New("no")), false},
		{errors.Join(errors.New("wrapped"), apierrors.NewInternalError(errors.New("etcd"))), false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{context.DeadlineExceeded, true},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
