package cli

import (
	"bytes"
	"encoding/pem"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"vksfleet.dev/fleet/cli/install"
)

// TestUnjoinGoneMember: unjoin of a member whose API server does not answer changes nothing and names the
// broker-only way; --broker-only needs --cluster-id, reads no context (the kubeconfig may be gone with the
// cluster) and goes to the broker alone; broker uninstall names the broker with --context, as init does.
func TestUnjoinGoneMember(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "https://" + l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gone"] = &clientcmdapi.Cluster{Server: nowhere, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["gone"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "gone"}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	// Any CA: the broker listens nowhere.
	tlsServer := httptest.NewTLSServer(nil)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsServer.Certificate().Raw})
	tlsServer.Close()
	brokerInfo := filepath.Join(dir, "broker-info.yaml")
	if err := (install.BrokerInfo{Server: nowhere, CertificateAuthorityData: ca, ClusterSet: "prod", Token: "t"}).Write(brokerInfo); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args      []string
		want, not []string
	}{
		{args: []string{"--kubeconfig", kubeconfig, "--context", "gone", "unjoin", "--cluster-id", "cluster-a", "--broker-info", brokerInfo},
			want: []string{"does not answer", "nothing changed", "kubectl mcs unjoin --broker-only --cluster-id cluster-a --broker-info " + brokerInfo},
			not:  []string{"ok    cluster id"}},
		{args: []string{"--kubeconfig", kubeconfig, "--context", "gone", "unjoin", "--broker-info", brokerInfo},
			want: []string{"--broker-only --cluster-id ID"}},
		{args: []string{"unjoin", "--broker-only", "--broker-info", brokerInfo},
			want: []string{"--broker-only needs --cluster-id"}},
		// The broker listens nowhere either: the first broker step fails, and no context was read.
		{args: []string{"--kubeconfig", filepath.Join(dir, "absent"), "unjoin", "--broker-only", "--cluster-id", "cluster-a", "--broker-info", brokerInfo},
			want: []string{"broker credentials revoked", "mcs-member-cluster-a-"}, not: []string{"kubeconfig", "member reachable"}},
		{args: []string{"--kubeconfig", kubeconfig, "--broker-context", "gone", "broker", "uninstall"},
			want: []string{"name the broker with --context"}},
	} {
		var out bytes.Buffer
		cmd := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(c.args)
		err := cmd.Execute()
		if err == nil {
			t.Errorf("%v succeeded:\n%s", c.args, out.String())
			continue
		}
		text := err.Error() + "\n" + out.String()
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%v: %q does not say %q", c.args, text, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(text, w) {
				t.Errorf("%v: %q says %q", c.args, text, w)
			}
		}
	}
}
