package corefile

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the checked-in Corefiles from the template")

// The files users read must be what the template renders: `go test ./build/deploy/corefile -update` rewrites
// them after a change of the template.
func TestFilesAreRendered(t *testing.T) {
	for path, want := range Files() {
		full := filepath.Join("..", "..", "..", filepath.FromSlash(path))
		if *update {
			if err := os.WriteFile(full, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(full)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not the template's rendering (go test ./build/deploy/corefile -update rewrites it):\n%s\nwant:\n%s", path, got, want)
		}
	}
}

func TestRender(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Server
		want string
	}{
		{"zero", Server{}, ".:53 {\n    errors\n}\n"},
		{"local, both plugins", Server{
			Port: 1053, Bind: []string{"127.0.0.1", "10.0.0.1"}, Stock: Stock{Ready: true}, ReadyAddr: "127.0.0.1:1054",
			Kubeconfig: "/kc", Context: "east",
			Kubernetes: &Kubernetes{Reverse: true, Namespaces: []string{"default"}}, Multicluster: &Multicluster{Reverse: true},
		}, `.:1053 {
    bind 127.0.0.1 10.0.0.1
    errors
    ready 127.0.0.1:1054
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig /kc east
        namespaces default
        fallthrough in-addr.arpa ip6.arpa
    }
    multicluster clusterset.local in-addr.arpa ip6.arpa {
        kubeconfig /kc east
        ttl 5
    }
}
`},
		{"stock CoreDNS's multicluster, profiled", Server{
			Pprof: "127.0.0.1:6060", Kubeconfig: "/kc", Kubernetes: &Kubernetes{Multicluster: true, TTL: 5},
		}, `.:53 {
    errors
    pprof 127.0.0.1:6060
    kubernetes cluster.local clusterset.local {
        kubeconfig /kc
        multicluster clusterset.local
        ttl 5
    }
}
`},
		{"transfer, endpoint, reload", Server{
			Endpoint: "http://127.0.0.1:1", Multicluster: &Multicluster{}, TransferTo: "*",
			Stock: Stock{Reload: true}, ReloadEvery: 2 * time.Second,
		}, `.:53 {
    errors
    multicluster clusterset.local {
        endpoint http://127.0.0.1:1
        ttl 5
    }
    transfer {
        to *
    }
    reload 2s
}
`},
		{"stock plugins on local addresses", Server{
			Stock: Stock{Health: true, Prometheus: true, Forward: true}, HealthAddr: "127.0.0.1:1", MetricsAddr: "127.0.0.1:2",
			Upstream: "127.0.0.1:3", Whoami: true,
		}, `.:53 {
    errors
    health 127.0.0.1:1 {
        lameduck 5s
    }
    prometheus 127.0.0.1:2
    forward . 127.0.0.1:3 {
        max_concurrent 1000
    }
    whoami
}
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.Render(); got != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
