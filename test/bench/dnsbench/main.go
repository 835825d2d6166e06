// Command dnsbench compares our CoreDNS build with stock CoreDNS on the same clusterset.local data in the same
// run: one kube-apiserver is loaded with ClusterSetIP and headless ServiceImports and their EndpointSlices; both
// builds run with a minimal Corefile and with the Corefile users deploy, next to a ceiling (stock CoreDNS
// answering with whoami behind the same plugins) and bare whoami, all pinned to one core (GOMAXPROCS=1,
// taskset), and dnsperf, on the other core, measures every query class on each in turn. The result is Markdown
// tables of ratios: ours/stock, ours/ceiling and resident memory. `make bench-dns` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/build/deploy/corefile"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
)

func main() {
	out := flag.String("out", "test/bench/results/dns.md", "where to write the results table")
	ipImports := flag.Int("clustersetip", 5000, "ClusterSetIP imports to load")
	headless := flag.Int("headless", 1000, "headless imports to load")
	clusters := flag.Int("clusters", 3, "source clusters per headless import")
	endpoints := flag.Int("endpoints", 4, "endpoints per cluster per headless import")
	duration := flag.Duration("duration", 5*time.Second, "dnsperf saturation run length per query class, server and repetition")
	profile := flag.String("profile", "", "if set, a folder for each server's heap profile and a CPU profile of its first class")
	chartsFrom := flag.String("charts-from", "", "measure nothing: draw the charts of the report at this path, beside it")
	flag.Parse()
	if *chartsFrom != "" {
		classes, qps, err := parseReport(*chartsFrom)
		if err == nil {
			err = writeCharts(filepath.Dir(*chartsFrom), classes, qps)
		}
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	d := dataset{namespaces: 10, clusterSetIP: *ipImports, headless: *headless, clusters: *clusters, endpoints: *endpoints}
	if err := run(d, *out, *duration, *profile); err != nil {
		log.Fatal(err)
	}
}

// repetitions is how often each class is measured on each server; the median is reported.
const repetitions = 3

// dataset says how much data to load; names are derived from indices so queries can be generated without state.
type dataset struct {
	namespaces, clusterSetIP, headless, clusters, endpoints int
}

func (d dataset) ns(i int) string { return fmt.Sprintf("bench-%d", i%d.namespaces) }

func run(d dataset, out string, duration time.Duration, profile string) error {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "dnsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	log.Print("building our coredns, unless the cache has it, and stock coredns")
	bin, err := framework.Build()
	if err != nil {
		return err
	}
	ours, stock := filepath.Join(bin, "coredns"), filepath.Join(work, "stock", "coredns")
	if err := framework.BuildPackages(filepath.Dir(stock), "github.com/coredns/coredns"); err != nil {
		return err
	}

	log.Print("starting one kube-apiserver")
	cs, err := clusterset.Start(ctx, clusterset.Options{Members: []string{"bench"}, NoBroker: true})
	if err != nil {
		return err
	}
	defer cs.Stop()
	c := cs.Members[0]
	start := time.Now()
	n, err := d.load(ctx, c.Client)
	if err != nil {
		return err
	}
	log.Printf("loaded %d objects in %s", n, time.Since(start).Round(time.Millisecond))

	classes := d.queryClasses()
	for _, q := range classes {
		if err := writeQueries(filepath.Join(work, q.file()), q.names); err != nil {
			return err
		}
	}
	// The Corefile users deploy (build/deploy/coredns/Corefile), with an upstream that is never asked: every
	// question is in clusterset.local. Without loop, which would probe through that upstream, and reload.
	deployed := corefile.Deployed()
	deployed.Comments, deployed.Upstream = false, "127.0.0.1:1"
	deployed.Stock.Loop, deployed.Stock.Reload = false, false
	// Stock's kubernetes plugin serves both zones with one TTL: 5 s, as multicluster's, so that the cache keeps
	// clusterset.local answers as long in both.
	stockDeployed := deployed
	stockDeployed.Kubernetes = &corefile.Kubernetes{Reverse: true, Pods: true, Multicluster: true, TTL: 5}
	stockDeployed.Multicluster = nil
	servers := []server{
		// Ours as deployed: kubernetes leaves the imported slices to multicluster. Stock's cannot: its multicluster
		// option reads them through the same plugin.
		{name: "ours", bin: ours, conf: corefile.Server{Kubernetes: &corefile.Kubernetes{LeaveImported: true}, Multicluster: &corefile.Multicluster{}}},
		{name: "stock", bin: stock, conf: corefile.Server{Kubernetes: &corefile.Kubernetes{Multicluster: true}}},
		// The ceiling: stock CoreDNS answering every query with whoami, which builds a two-record reply from the
		// question alone, behind the same plugins as ours (kubernetes passes clusterset.local on), in a process
		// that runs the same kind of informers. Only the answer differs.
		{name: "ceiling", bin: stock, anyReply: true, conf: corefile.Server{Kubernetes: &corefile.Kubernetes{LeaveImported: true}, Whoami: true}},
		// whoami alone, for reference: no plugin in front, and no informer goroutines. Go sizes a new goroutine's
		// stack by the average of all goroutines, and the informers' are small: in processes that have them, the
		// stack of every query's goroutine grows and is copied (15-25% of the CPU under dnsperf), here much less.
		{name: "bare", bin: stock, anyReply: true, conf: corefile.Server{Whoami: true}},
		{name: "ours-deployed", bin: ours, conf: deployed},
		{name: "stock-deployed", bin: stock, conf: stockDeployed},
	}
	// Every server runs at once, on the same core, and the classes are measured on each in turn, reps times, so
	// that a slow spell of this shared machine falls on all of them rather than on one; the median is reported.
	var started []*running
	defer func() {
		for _, r := range started {
			r.stop()
		}
	}()
	for _, s := range servers {
		r, err := s.start(work, c, classes, profile)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		started = append(started, r)
	}
	results := map[string]map[string]measurement{}
	for qi, q := range classes {
		reps := map[string][]measurement{}
		for rep := range repetitions {
			for k := range started {
				r := started[(k+rep)%len(started)]
				prof := ""
				if profile != "" && qi == 0 && rep == 0 {
					prof = profile
				}
				m, err := r.measure(filepath.Join(work, q.file()), duration, prof)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", r.name, q.name, err)
				}
				reps[r.name] = append(reps[r.name], m)
			}
		}
		for _, r := range started {
			if results[r.name] == nil {
				results[r.name] = map[string]measurement{}
			}
			m := median(reps[r.name])
			results[r.name][q.name] = m
			log.Printf("%-5s %-16s %9.0f qps  %.3f ms %s", r.name, q.name, m.qps, m.latencyMs, m.errorsSeen)
		}
	}
	mem := map[string]proc.Usage{}
	for _, r := range started {
		m, err := proc.UsageOf(r.p.Pid())
		if err != nil {
			return err
		}
		mem[r.name] = m
	}
	table := report(d, classes, results, mem, duration)
	fmt.Print(table)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
		return err
	}
	qps := map[string]map[string]float64{}
	var names []string
	for _, q := range classes {
		names = append(names, q.name)
	}
	for server, byClass := range results {
		qps[server] = map[string]float64{}
		for class, m := range byClass {
			qps[server][class] = m.qps
		}
	}
	return writeCharts(filepath.Dir(out), names, qps)
}

// load creates the namespaces, ServiceImports and EndpointSlices with a few parallel writers.
func (d dataset) load(ctx context.Context, cl client.Client) (int, error) {
	var objs []client.Object
	for i := range d.namespaces {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns(i)}})
	}
	if err := createAll(ctx, cl, objs); err != nil {
		return 0, err
	}
	n := len(objs)
	objs = objs[:0]
	for i := range d.clusterSetIP {
		objs = append(objs, &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: d.ns(i)},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:       mcsv1beta1.ClusterSetIP,
				IPs:        []string{fmt.Sprintf("10.200.%d.%d", i/250, i%250+1)},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports: []mcsv1beta1.ServicePort{
					{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
					{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090},
				},
			},
		})
	}
	for i := range d.headless {
		name := fmt.Sprintf("hl-%d", i)
		objs = append(objs, &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.ns(i)},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:       mcsv1beta1.Headless,
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			},
		})
		for k := range d.clusters {
			slice := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("%s-c%d", name, k), Namespace: d.ns(i),
					Labels: map[string]string{
						mcsv1beta1.LabelServiceName:   name,
						mcsv1beta1.LabelSourceCluster: clusterID(k),
						discoveryv1.LabelManagedBy:    names.ManagedBy,
						discoveryv1.LabelServiceName:  name,
					},
				},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](80)}},
			}
			for e := range d.endpoints {
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 1+k, (i*d.endpoints+e)/250, (i*d.endpoints+e)%250+1)},
					Hostname:   ptr.To(fmt.Sprintf("ep-%d", e)),
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
				})
			}
			objs = append(objs, slice)
		}
	}
	return n + len(objs), createAll(ctx, cl, objs)
}

func clusterID(k int) string { return fmt.Sprintf("cluster-%d", k+1) }

// createAll creates objects with 16 concurrent writers, stopping at the first error.
func createAll(ctx context.Context, cl client.Client, objs []client.Object) error {
	ch := make(chan client.Object)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range 16 {
		wg.Go(func() {
			for o := range ch {
				if err := cl.Create(ctx, o); err != nil {
					once.Do(func() { first = fmt.Errorf("creating %s: %w", o.GetName(), err) })
				}
			}
		})
	}
	for _, o := range objs {
		ch <- o
	}
	close(ch)
	wg.Wait()
	return first
}

// queryClass is a set of names of one kind, asked in turn by dnsperf.
type queryClass struct {
	name  string
	names []string // "name TYPE" lines
}

func (q queryClass) file() string {
	return strings.NewReplacer(" ", "-", "/", "-").Replace(q.name) + ".txt"
}

// queryClasses builds up to 1,000 distinct queries per class, spread over the whole data set.
func (d dataset) queryClasses() []queryClass {
	const perClass = 1000
	zone := "svc." + names.DNSZone + "."
	classes := []queryClass{{name: "ClusterSetIP A"}, {name: "ClusterSetIP SRV"}, {name: "headless A"},
		{name: "headless SRV"}, {name: "per-endpoint A"}, {name: "NXDOMAIN"}}
	for j := range perClass {
		i := j * d.clusterSetIP / perClass
		h := j * d.headless / perClass
		classes[0].names = append(classes[0].names, fmt.Sprintf("svc-%d.%s.%s A", i, d.ns(i), zone))
		classes[1].names = append(classes[1].names, fmt.Sprintf("_http._tcp.svc-%d.%s.%s SRV", i, d.ns(i), zone))
		classes[2].names = append(classes[2].names, fmt.Sprintf("hl-%d.%s.%s A", h, d.ns(h), zone))
		classes[3].names = append(classes[3].names, fmt.Sprintf("_http._tcp.hl-%d.%s.%s SRV", h, d.ns(h), zone))
		classes[4].names = append(classes[4].names, fmt.Sprintf("ep-%d.%s.hl-%d.%s.%s A", j%d.endpoints, clusterID(j%d.clusters), h, d.ns(h), zone))
		classes[5].names = append(classes[5].names, fmt.Sprintf("missing-%d.%s.%s A", j, d.ns(j), zone))
	}
	return classes
}

func writeQueries(path string, names []string) error {
	return os.WriteFile(path, []byte(strings.Join(names, "\n")+"\n"), 0o644)
}

// server is one CoreDNS binary and its server block, which start completes with the ports and the loaded
// cluster's kubeconfig.
type server struct {
	name, bin string
	conf      corefile.Server
	anyReply  bool // the server answers every name alike (whoami): any reply means it is up
}

// measurement is what dnsperf reported for one query class.
type measurement struct {
	qps        float64
	latencyMs  float64 // mean, at a fixed moderate rate
	errorsSeen string  // non-empty when replies had unexpected rcodes or were lost
}

// running is a started server.
type running struct {
	server
	port      int
	pprofAddr string
	p         *proc.Process
	logf      *os.File
}

// start starts the server pinned to core 0 with GOMAXPROCS=1 and waits until it answers every class correctly.
func (s server) start(work string, c *clusterset.Cluster, classes []queryClass, profile string) (*running, error) {
	r := &running{server: s}
	ports, err := clusterset.FreePorts(5)
	if err != nil {
		return nil, err
	}
	loopback := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	conf := s.conf
	conf.Port, conf.Kubeconfig, conf.Context = ports[0], c.KubeconfigPath, c.Name
	conf.HealthAddr, conf.ReadyAddr, conf.MetricsAddr = loopback(ports[1]), loopback(ports[2]), loopback(ports[3])
	if profile != "" {
		r.pprofAddr = loopback(ports[4])
		conf.Pprof = r.pprofAddr
	}
	r.port = conf.Port
	if r.logf, err = os.Create(filepath.Join(work, s.name+".log")); err != nil {
		return nil, err
	}
	// Readiness is every class answered, below, for stock CoreDNS as for ours.
	r.p, err = framework.StartCorefile(context.Background(), r.logf, s.name, filepath.Join(work, "Corefile."+s.name), conf.Render(), "",
		"taskset", "-c", "0", "env", "GOMAXPROCS=1", s.bin)
	if err != nil {
		r.logf.Close()
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", r.port)
	log.Printf("%s: waiting for answers on %s", s.name, addr)
	if err := waitAnswers(addr, classes, s.anyReply); err != nil {
		r.stop()
		return nil, fmt.Errorf("%w (log: %s)", err, tail(r.logf.Name()))
	}
	return r, nil
}

func (r *running) stop() {
	r.p.Kill()
	r.logf.Close()
}

// measure runs dnsperf for one class: QPS at saturation, then mean latency at a fixed moderate rate. With
// profile set, it also saves a heap profile and a CPU profile taken during the saturated run.
func (r *running) measure(path string, duration time.Duration, profile string) (measurement, error) {
	var profiled sync.WaitGroup
	if profile != "" {
		if err := fetch("http://"+r.pprofAddr+"/debug/pprof/heap?gc=1", filepath.Join(profile, r.name+"-heap.pprof")); err != nil {
			return measurement{}, err
		}
		profiled.Go(func() {
			secs := strconv.Itoa(max(1, int(duration.Seconds())-1))
			if err := fetch("http://"+r.pprofAddr+"/debug/pprof/profile?seconds="+secs, filepath.Join(profile, r.name+"-cpu.pprof")); err != nil {
				log.Printf("%s: CPU profile: %v", r.name, err)
			}
		})
	}
	sat, err := dnsperf(r.port, path, duration, "-c", "20", "-q", "200")
	profiled.Wait()
	if err != nil {
		return measurement{}, err
	}
	lat, err := dnsperf(r.port, path, 2*time.Second, "-Q", "2000")
	if err != nil {
		return measurement{}, err
	}
	return measurement{qps: sat.qps, latencyMs: lat.latencyMs, errorsSeen: sat.errorsSeen + lat.errorsSeen}, nil
}

// median returns the median of the repetitions' QPS and of their latencies, and every error seen.
func median(ms []measurement) measurement {
	qps := make([]float64, len(ms))
	lat := make([]float64, len(ms))
	var out measurement
	for i, m := range ms {
		qps[i], lat[i] = m.qps, m.latencyMs
		out.errorsSeen += m.errorsSeen
	}
	slices.Sort(qps)
	slices.Sort(lat)
	out.qps, out.latencyMs = qps[len(qps)/2], lat[len(lat)/2]
	return out
}

// waitAnswers polls until the first query of every class gets its expected rcode, so that dnsperf never measures
// a server that is still syncing; with anyReply, until it gets a reply at all.
func waitAnswers(addr string, classes []queryClass, anyReply bool) error {
	cl := &dns.Client{Timeout: time.Second}
	for _, q := range classes {
		f := strings.Fields(q.names[0])
		want := dns.RcodeSuccess
		if q.name == "NXDOMAIN" {
			want = dns.RcodeNameError
		}
		err := poll.Until(context.Background(), 200*time.Millisecond, 2*time.Minute, func() error {
			m := new(dns.Msg)
			m.SetQuestion(f[0], dns.StringToType[f[1]])
			r, _, err := cl.Exchange(m, addr)
			switch {
			case err != nil:
				return err
			case anyReply:
				return nil
			case r.Rcode != want || (want == dns.RcodeSuccess && len(r.Answer) == 0):
				return fmt.Errorf("reply %v", r)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%q not answered as expected: %w", q.names[0], err)
		}
	}
	return nil
}

var (
	qpsRe     = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	latencyRe = regexp.MustCompile(`Average Latency \(s\):\s+([0-9.]+)`)
	lostRe    = regexp.MustCompile(`Queries lost:\s+(\d+)`)
	rcodeRe   = regexp.MustCompile(`Response codes:\s+(.*)`)
)

// dnsperf runs dnsperf on core 1 against the server and parses its summary.
func dnsperf(port int, queries string, d time.Duration, extra ...string) (measurement, error) {
	args := append([]string{"-c", "1", "dnsperf", "-s", "127.0.0.1", "-p", strconv.Itoa(port), "-d", queries,
		"-l", strconv.Itoa(int(d.Seconds())), "-t", "2"}, extra...)
	out, err := exec.Command("taskset", args...).CombinedOutput()
	if err != nil {
		return measurement{}, fmt.Errorf("dnsperf: %v\n%s", err, out)
	}
	var m measurement
	if v := qpsRe.FindSubmatch(out); v != nil {
		m.qps, _ = strconv.ParseFloat(string(v[1]), 64)
	}
	if v := latencyRe.FindSubmatch(out); v != nil {
		s, _ := strconv.ParseFloat(string(v[1]), 64)
		m.latencyMs = s * 1000
	}
	if v := lostRe.FindSubmatch(out); v != nil && string(v[1]) != "0" {
		m.errorsSeen += " lost " + string(v[1])
	}
	if m.qps == 0 {
		return m, fmt.Errorf("dnsperf reported no rate:\n%s", out)
	}
	if v := rcodeRe.FindSubmatch(out); v != nil && strings.Contains(string(v[1]), "SERVFAIL") {
		m.errorsSeen += " " + string(v[1])
	}
	return m, nil
}

// fetch saves the body of a GET to path.
func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func report(d dataset, classes []queryClass, res map[string]map[string]measurement, mem map[string]proc.Usage, duration time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# DNS benchmark: our CoreDNS build vs stock CoreDNS 1.15.0\n\n")
	fmt.Fprintf(&b, "Data: %d ClusterSetIP imports, %d headless imports x %d clusters x %d endpoints, in %d namespaces, on one kube-apiserver.\n",
		d.clusterSetIP, d.headless, d.clusters, d.endpoints, d.namespaces)
	fmt.Fprintf(&b, "Each server: one core (taskset -c 0, GOMAXPROCS=1); dnsperf on the other core, %s per class at saturation (-c 20 -q 200) for QPS, "+
		"then 2 s at 2,000 QPS for mean latency; all servers run at once and are measured in turn, %d times per class, medians shown. "+
		"The ceiling is stock CoreDNS answering with `whoami` behind the same plugins as ours (errors, kubernetes cluster.local leaving the imported slices, whoami): the same server, pipeline and writer, with almost no work for the answer; bare whoami (errors, whoami) has no plugin in front and no informers. "+
		"Generated by `make bench-dns` on %s.\n\n", duration, repetitions, time.Now().UTC().Format("2006-01-02"))

	b.WriteString("## Minimal Corefile (errors, kubernetes, multicluster)\n\n")
	b.WriteString("![QPS per class: ours, stock CoreDNS and the ceiling](" + minimalChart + ")\n\n")
	b.WriteString("| query class | ours QPS | stock QPS | ceiling QPS | bare whoami QPS | QPS ours/stock | ours/ceiling | stock/ceiling | ours/bare whoami | latency ours/stock |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, q := range classes {
		o, s, c, w := res["ours"][q.name], res["stock"][q.name], res["ceiling"][q.name], res["bare"][q.name]
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | **%.2f** | **%.2f** | %.2f | %.2f | %.2f |\n", q.name, o.qps, s.qps, c.qps, w.qps,
			o.qps/s.qps, o.qps/c.qps, s.qps/c.qps, o.qps/w.qps, o.latencyMs/s.latencyMs)
	}
	b.WriteString("\n## Deployed Corefile (errors, health, ready, kubernetes, multicluster, prometheus, forward to an unreachable local upstream, cache 30, loadbalance)\n\n")
	b.WriteString("![QPS per class: ours and stock CoreDNS](" + deployedChart + ")\n\n")
	b.WriteString("| query class | ours QPS | stock QPS | QPS ours/stock | ours latency ms | stock latency ms | latency ours/stock |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, q := range classes {
		o, s := res["ours-deployed"][q.name], res["stock-deployed"][q.name]
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | **%.2f** | %.3f | %.3f | %.2f |\n", q.name, o.qps, s.qps, o.qps/s.qps, o.latencyMs, s.latencyMs, o.latencyMs/s.latencyMs)
	}
	b.WriteString("\n## Memory (resident set size, MiB)\n\n")
	b.WriteString("| Corefile | ours peak | stock peak | peak ours/stock | ours after the run | stock after the run | after the run ours/stock |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range []struct{ name, ours, stock string }{{"minimal", "ours", "stock"}, {"deployed", "ours-deployed", "stock-deployed"}} {
		o, st := mem[row.ours], mem[row.stock]
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | **%.2f** | %.0f | %.0f | **%.2f** |\n", row.name, mib(o.PeakRSS), mib(st.PeakRSS),
			float64(o.PeakRSS)/float64(st.PeakRSS), mib(o.RSS), mib(st.RSS), float64(o.RSS)/float64(st.RSS))
	}
	names := slices.Sorted(maps.Keys(res))
	for _, name := range names {
		for _, q := range classes {
			if e := res[name][q.name].errorsSeen; e != "" {
				fmt.Fprintf(&b, "\n%s, %s:%s", name, q.name, e)
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
