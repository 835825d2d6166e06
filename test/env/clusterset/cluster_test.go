package clusterset

import (
	"errors"
	"testing"
)

func TestGraceless(t *testing.T) {
	killed := errors.New("timeout waiting for process kube-apiserver to stop")
	other := errors.New("timeout waiting for process etcd to stop")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{killed, ""},
		{errors.Join(killed, other), other.Error()},
		{other, other.Error()},
	} {
		got := ""
		if err := graceless(tc.err); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("graceless(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
