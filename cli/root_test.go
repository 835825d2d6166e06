package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestCommandCouldNotRun runs the command tree on a kubeconfig whose clusters listen nowhere: every way it cannot
// run exits 2 with an error naming what failed.
func TestCommandCouldNotRun(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	for _, name := range []string{"hub", "prod-a"} {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "x"}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "prod-a"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "--context", "hub", "--broker-context", "prod-a"}, "alias"},
		{[]string{"status", "--context", "nope"}, `broker context "nope" is not in the kubeconfig`},
		{[]string{"status", "--context", "hub", "--server", "https://10.0.0.1"}, "--server name one cluster"},
		{[]string{"services", "-n", "demo", "-A"}, "exclude each other"},
		{[]string{"diagnose", "-o", "xml"}, "xml"},
		{[]string{"status", "--context", "hub", "--request-timeout", "1s"}, "reading the broker (context hub)"},
		{[]string{"status", "--bogus"}, "unknown flag"},
		{[]string{"status", "--kubeconfig", filepath.Join(t.TempDir(), "absent")}, "kubeconfig"},
	} {
		var out bytes.Buffer
		cmd := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, c.args...))
		err := cmd.Execute()
		if ExitCode(err) != ExitCouldNotRun || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit 2 with %q", c.args, ExitCode(err), err, c.want)
		}
	}
	// version prints without a broker.
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "--context", "hub", "--request-timeout", "1s", "version"})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "kubectl-mcs ") || !strings.Contains(out.String(), "broker: context hub") {
		t.Errorf("version: %v\n%s", err, out.String())
	}
}

// TestRestConfig: the flags that apply to every cluster reach the config of any context, not only the current one.
func TestRestConfig(t *testing.T) {
	cfg := clientcmdapi.NewConfig()
	for _, name := range []string{"hub", "prod-a"} {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: "https://" + name + ".example:6443"}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "token-of-" + name}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "hub"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	o := &options{config: genericclioptions.NewConfigFlags(true)}
	*o.config.KubeConfig, *o.config.Impersonate, *o.config.BearerToken = kubeconfig, "alice", "t0k3n"
	*o.config.ImpersonateGroup = []string{"ops", "dev"}
	rc, err := o.restConfig("prod-a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://prod-a.example:6443" || rc.Impersonate.UserName != "alice" || strings.Join(rc.Impersonate.Groups, ",") != "ops,dev" ||
		rc.BearerToken != "t0k3n" || rc.Timeout != 3*time.Second {
		t.Errorf("config of prod-a: host %s, impersonate %+v, token %q, timeout %s", rc.Host, rc.Impersonate, rc.BearerToken, rc.Timeout)
	}
}
