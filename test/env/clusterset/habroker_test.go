package clusterset

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"vksfleet.dev/fleet/test/env/poll"
)

// TestHABroker starts a highly available broker beside one member, checks its layout, then fails one API server
// at a time and etcd's leader, each time checking that the broker keeps answering through the load balancer, and
// that every process comes back; then that stopping leaves nothing behind.
func TestHABroker(t *testing.T) {
	apart(t)
	ctx := context.Background()
	start := time.Now()
	cs, err := Start(ctx, Options{Members: []string{"cluster-a"}, HABroker: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("HA broker + 1 member started in %s", time.Since(start).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cs.Stop()
		}
	})
	b := cs.Broker
	ha := b.HA
	if ha == nil || len(ha.Etcd) != haEtcdMembers || len(ha.APIServers) != haAPIServers || ha.LoadBalancer == nil {
		t.Fatalf("want 3 etcd members, 2 API servers and a load balancer, got %+v", ha)
	}
	if cs.Members[0].HA != nil {
		t.Errorf("member %s has HA processes", cs.Members[0].Name)
	}

	t.Run("clients are given the load balancer", func(t *testing.T) {
		if b.Config.Host != ha.LoadBalancer.URL {
			t.Errorf("broker config reaches %s, want the load balancer %s", b.Config.Host, ha.LoadBalancer.URL)
		}
		for _, a := range ha.APIServers {
			if a.URL == ha.LoadBalancer.URL {
				t.Errorf("%s serves at the load balancer's address %s", a.Name, a.URL)
			}
		}
		kc, err := clientcmd.LoadFromFile(b.KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if got := kc.Clusters[BrokerName].Server; got != ha.LoadBalancer.URL {
			t.Errorf("broker kubeconfig server %s, want the load balancer %s", got, ha.LoadBalancer.URL)
		}
	})
	t.Run("etcd has 3 healthy members", func(t *testing.T) {
		names := etcdMemberNames(t, ha.Etcd[0].URL)
		if len(names) != haEtcdMembers {
			t.Errorf("etcd members %v, want %d", names, haEtcdMembers)
		}
		for _, e := range ha.Etcd {
			if err := etcdHealthy(e.URL); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("both API servers are ready and share credentials", func(t *testing.T) {
		for _, a := range ha.APIServers {
			// The administrator's certificate, and the serving certificate, are good on each one directly.
			direct := rest.CopyConfig(b.Config)
			direct.Host = a.URL
			kube := kubernetes.NewForConfigOrDie(direct)
			if _, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
				t.Errorf("%s: %v", a.Name, err)
			}
			// A token one API server issued is good on the other: one issuer and signing key.
			if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: a.Name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, a.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, other := range ha.APIServers {
				cfg := &rest.Config{Host: other.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: b.Config.CAData}}
				err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").Delete(ctx, "absent", metav1.DeleteOptions{})
				// Authenticated, not authorized: 403, where a token the API server rejects gets 401.
				if err == nil || !strings.Contains(err.Error(), "forbidden") {
					t.Errorf("token of %s on %s: %v, want forbidden", a.Name, other.Name, err)
				}
			}
		}
		if _, err := b.Kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("through the load balancer: %v", err)
		}
		waitInService(t, ha, ha.APIServers[0].Name, ha.APIServers[1].Name)
	})
	for i, a := range ha.APIServers {
		t.Run(fmt.Sprintf("the broker answers without %s", a.Name), func(t *testing.T) {
			a.Kill()
			checkWrites(t, b, fmt.Sprintf("api%d", i), true)
			waitInService(t, ha, ha.APIServers[1-i].Name)
			if err := a.Restart(ctx); err != nil {
				t.Fatalf("restarting %s: %v", a.Name, err)
			}
		})
	}
	t.Run("the broker takes writes without etcd's leader", func(t *testing.T) {
		leader := etcdLeader(t, ha)
		leader.Kill()
		checkWrites(t, b, "etcd", false)
		for _, e := range ha.Etcd {
			if e != leader {
				if err := etcdHealthy(e.URL); err != nil {
					t.Error(err)
				}
			}
		}
		if err := leader.Restart(ctx); err != nil {
			t.Fatalf("restarting %s: %v", leader.Name, err)
		}
		if names := etcdMemberNames(t, leader.URL); len(names) != haEtcdMembers {
			t.Errorf("etcd members after %s's restart: %v", leader.Name, names)
		}
	})
	t.Run("a paused load balancer answers nothing until resumed", func(t *testing.T) {
		if err := ha.LoadBalancer.Pause(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := freshClient(t, b.Config).CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Error("the paused load balancer answered")
		}
		if err := ha.LoadBalancer.Resume(); err != nil {
			t.Fatal(err)
		}
		poll.T(t, 10*time.Second, "the resumed load balancer answers", func() error {
			_, err := b.Kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		})
	})

	if n := len(childPIDs(t)); n < 3*1+3+2+1+1 { // the member's etcd, apiserver, kcm; the broker's 3 etcd, 2 API servers, HAProxy, kcm
		t.Errorf("expected at least 10 child processes while running, found %d", n)
	}
	dir := b.dir
	if err := cs.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	stopped = true
	if left := childPIDs(t); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("folder %s left after Stop", dir)
	}
}

// checkWrites writes through the load balancer, right after one of the broker's processes failed: first with new
// connections, which HAProxy must send to an API server that answers (redispatching any it sent to a dead one),
// then with the broker's client, whose one connection may have gone to a dead API server and fail once. It
// reports how long and how many failed writes the broker took to answer again; lossless, after an API server's
// crash, none may fail on a new connection.
func checkWrites(t *testing.T, b *Cluster, prefix string, lossless bool) {
	t.Helper()
	ctx := context.Background()
	fresh := freshClient(t, b.Config)
	write := func(kube kubernetes.Interface, n int) error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, n), Namespace: "default"}}
		_, err := kube.CoreV1().ConfigMaps("default").Create(rctx, cm, metav1.CreateOptions{})
		return err
	}
	start := time.Now()
	failures, n := 0, 0
	// Until the broker takes one write: no time at all after an API server's crash, an election after etcd's
	// leader's.
	err := poll.Until(ctx, poll.Interval, 30*time.Second, func() error {
		n++
		if err := write(fresh, n); err != nil {
			failures++
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("no write through the load balancer: %v", err)
	}
	recovered := time.Since(start)
	if lossless && failures > 0 {
		t.Errorf("%d writes on new connections failed, which HAProxy should have retried on the API server that runs", failures)
	}
	// Then every one: round robin gives every other new connection to the failed API server, if it was one.
	for range 20 {
		n++
		if err := write(fresh, n); err != nil {
			t.Errorf("write %d, after the broker took one: %v", n, err)
		}
	}
	shared := 0
	err = poll.Until(ctx, poll.Interval, 30*time.Second, func() error {
		n++
		if err := write(b.Kube, n); err != nil {
			shared++
			return err
		}
		return nil
	})
	if err != nil {
		t.Errorf("the broker's client: %v", err)
	}
	t.Logf("first write after %s, %d failed before it; 20 more on new connections; the broker's client failed %d times", recovered.Round(time.Millisecond), failures, shared)
	if shared > 1 {
		t.Errorf("the broker's client failed %d times, want at most one, on the connection it had", shared)
	}
}

// waitInService waits until the load balancer's health checks have exactly the API servers names in service.
func waitInService(t *testing.T, ha *HABroker, names ...string) {
	t.Helper()
	poll.T(t, 10*time.Second, "the load balancer's API servers in service", func() error {
		got, err := ha.InService()
		if err == nil && !slices.Equal(got, names) {
			err = fmt.Errorf("in service: %v, want %v", got, names)
		}
		return err
	})
}

// freshClient is a client of cfg that opens a connection for every request.
func freshClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	tls, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tls, DisableKeepAlives: true}}
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// etcdHealthy checks etcd's /health at url: true once the member sees a leader.
func etcdHealthy(url string) error {
	var health struct {
		Health string `json:"health"`
	}
	resp, err := http.Get(url + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		return err
	}
	if health.Health != "true" {
		return fmt.Errorf("etcd at %s: health %q", url, health.Health)
	}
	return nil
}

// etcdPost posts an empty request to etcd's JSON gateway at url and decodes the answer into out.
func etcdPost(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// etcdMemberNames lists the etcd cluster's members, as the member at url knows them.
func etcdMemberNames(t *testing.T, url string) []string {
	t.Helper()
	var list struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	etcdPost(t, url+"/v3/cluster/member/list", &list)
	names := make([]string, len(list.Members))
	for i, m := range list.Members {
		names[i] = m.Name
	}
	return names
}

// etcdLeader returns the etcd member that leads, as every member says.
func etcdLeader(t *testing.T, ha *HABroker) *BrokerProcess {
	t.Helper()
	var leader *BrokerProcess
	leaders := map[string]bool{}
	for _, e := range ha.Etcd {
		var status struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		etcdPost(t, e.URL+"/v3/maintenance/status", &status)
		leaders[status.Leader] = true
		if status.Leader == status.Header.MemberID {
			leader = e
		}
	}
	if leader == nil || len(leaders) != 1 {
		t.Fatalf("the etcd members name leaders %v; found the leader: %v", leaders, leader != nil)
	}
	return leader
}

// TestPlanHABroker: only the broker is highly available, and only a clusterset with a broker can have one.
func TestPlanHABroker(t *testing.T) {
	specs, _, err := plan(Options{Members: []string{"cluster-a"}, HABroker: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.ha != (s.name == BrokerName) {
			t.Errorf("%s: ha %v", s.name, s.ha)
		}
	}
	if _, _, err := plan(Options{Members: []string{"cluster-a"}, HABroker: true, NoBroker: true}); err == nil {
		t.Error("plan with HABroker and NoBroker: no error")
	}
}

// TestParseServersState reads `show servers state` as HAProxy 2.6 writes it: only running servers (state 2) are in
// service.
func TestParseServersState(t *testing.T) {
	out := "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state\n" +
		"3 apiservers 1 broker-apiserver-0 127.0.0.1 0 0\n3 apiservers 2 broker-apiserver-1 127.0.0.1 2 0\n\n"
	got, err := parseServersState(out)
	if err != nil || !slices.Equal(got, []string{"broker-apiserver-1"}) {
		t.Errorf("parseServersState = %v, %v; want [broker-apiserver-1]", got, err)
	}
	if _, err := parseServersState("1\n3 apiservers 1 broker-apiserver-0\n"); err == nil {
		t.Error("parseServersState without a header: no error")
	}
}
