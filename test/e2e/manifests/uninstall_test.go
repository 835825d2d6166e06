package manifests

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

// unjoinGone takes the member id, whose cluster is gone, out of the broker as an operator does, with `kubectl
// mcs`: unjoin through a context that answers nowhere changes nothing and names the broker-only way; `unjoin
// --broker-only` then takes it out with the broker-info file alone, no kubeconfig at all: its namespace and
// directory entry go, and its credential's token is refused.
func unjoinGone(t *testing.T, cs *clusterset.ClusterSet, info install.BrokerInfo, id string, cred credential) {
	ctx := context.Background()
	dir := t.TempDir()
	brokerInfo := filepath.Join(dir, "broker-info.yaml")
	if err := info.Write(brokerInfo); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "https://" + l.Addr().String()
	l.Close()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gone"] = &clientcmdapi.Cluster{Server: gone, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["gone"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "gone"}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubectlMCS := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := cli.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		t.Logf("$ kubectl mcs %s\n%s", strings.Join(args, " "), out.String())
		return out.String(), err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names.BrokerNamespace(id)}}
	_, err = kubectlMCS("--kubeconfig", kubeconfig, "--context", "gone", "unjoin", "--cluster-id", id, "--broker-info", brokerInfo)
	if err == nil || !strings.Contains(err.Error(), "kubectl mcs unjoin --broker-only --cluster-id "+id) {
		t.Errorf("unjoin of a member whose API server is gone: %v, want the broker-only way named", err)
	}
	if err := cs.Broker.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
		t.Errorf("namespace %s after an unjoin that could not reach the member: %v, want it untouched", ns.Name, err)
	}
	if _, err := kubectlMCS("--kubeconfig", filepath.Join(dir, "absent"), "unjoin", "--broker-only", "--cluster-id", id, "--broker-info", brokerInfo, "--wait", "1m"); err != nil {
		t.Fatalf("unjoin --broker-only: %v", err)
	}
	for _, o := range []client.Object{ns, broker.DirectoryEntry(id)} {
		if err := cs.Broker.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after unjoin --broker-only: %v, want NotFound", o, client.ObjectKeyFromObject(o), err)
		}
	}
	poll.T(t, 30*time.Second, id+"'s token refused after unjoin --broker-only", func() error {
		return wantUnauthorized(ctx, cs.Broker.Config, cred.config.BearerToken)
	})
}

// uninstallBroker takes the clusterset off the broker with `kubectl mcs broker uninstall`'s code, as the broker's
// administrator: refused, changing nothing, while member id is joined; with --force, the member evicted and
// everything init applied gone but the CRDs, and the joiner's token refused; run again, nothing deleted; with
// --delete-crds, the CRDs gone too; and init then prepares the broker again.
func uninstallBroker(t *testing.T, cs *clusterset.ClusterSet, info install.BrokerInfo, id string) {
	ctx := context.Background()
	admin := cs.Broker.Client
	uninstall := func(opts install.UninstallOptions) (string, error) {
		var out strings.Builder
		opts.Wait = time.Minute
		err := install.BrokerUninstall(ctx, cs.Broker.Config, opts, &out)
		t.Logf("broker uninstall %+v:\n%s", opts, out.String())
		return out.String(), err
	}
	exists := func(o client.Object) bool {
		t.Helper()
		err := admin.Get(ctx, client.ObjectKeyFromObject(o), o)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	// The joiner lives in the member directory's namespace, mcs-broker.
	joiner := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: broker.DirectoryNamespace, Name: "joiner"}}
	member := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names.BrokerNamespace(id)}}
	crds := []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io", "clusterproperties.about.k8s.io"}

	if _, err := uninstall(install.UninstallOptions{}); err == nil || !strings.Contains(err.Error(), "members still joined: "+id) {
		t.Errorf("uninstall with %s joined: %v, want a refusal naming it", id, err)
	}
	if !exists(joiner) || !exists(member) {
		t.Fatalf("a refused uninstall deleted the joiner (there: %v) or %s (there: %v)", exists(joiner), member.Name, exists(member))
	}

	if _, err := uninstall(install.UninstallOptions{Force: true}); err != nil {
		t.Fatalf("uninstall --force: %v", err)
	}
	poll.T(t, 30*time.Second, "the joiner's token refused after uninstall", func() error {
		return wantUnauthorized(ctx, cs.Broker.Config, info.Token)
	})
	for _, o := range []client.Object{
		member, joiner, broker.DirectoryEntry(id),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: broker.DirectoryNamespace}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-reader"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-writer"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-directory"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-joiner"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-joiner"}},
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-joiner"}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-member-tokens"}},
	} {
		if exists(o) {
			t.Errorf("uninstall --force left %T %s", o, client.ObjectKeyFromObject(o))
		}
	}
	for _, name := range crds {
		if !exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}) {
			t.Errorf("uninstall without --delete-crds deleted CRD %s", name)
		}
	}

	if out, err := uninstall(install.UninstallOptions{}); err != nil || !strings.Contains(out, "nothing left to delete") {
		t.Errorf("uninstall again: %v, want nothing deleted", err)
	}
	if _, err := uninstall(install.UninstallOptions{DeleteCRDs: true}); err != nil {
		t.Fatalf("uninstall --delete-crds: %v", err)
	}
	for _, name := range crds {
		if exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}) {
			t.Errorf("uninstall --delete-crds left CRD %s", name)
		}
	}
	// The broker is as before init: init prepares it again, and the new joiner gives a member its identity.
	again, err := install.BrokerInit(ctx, cs.Broker.Config, install.InitOptions{ClusterSet: "clusterset", TokenExpiration: time.Hour}, &strings.Builder{})
	if err != nil {
		t.Fatalf("broker init after uninstall: %v", err)
	}
	if err := install.BrokerIdentity(ctx, again, id); err != nil {
		t.Errorf("joining after uninstall and init: %v", err)
	}
}
