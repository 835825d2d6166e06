package helm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy/caddyfile"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/build/deploy"
	"vksfleet.dev/fleet/build/images"
	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/test/env/clusterset"
)

// TestChartUpToDate fails when the committed chart is not what the generator writes from the bases: a base changed
// without `make helm-chart`, or the chart was edited by hand.
func TestChartUpToDate(t *testing.T) {
	want, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	err = filepath.WalkDir(ChartDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(ChartDir, p)
		got[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		switch b, ok := got[name]; {
		case !ok:
			t.Errorf("%s/%s is missing", ChartDir, name)
		case !bytes.Equal(b, want[name]):
			t.Errorf("%s/%s differs from what the generator writes", ChartDir, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s/%s is not the generator's", ChartDir, name)
		}
	}
	if t.Failed() {
		t.Log("run `make helm-chart` and commit the chart")
	}
}

// helmBinary is the helm `make tools` builds. Without it the chart's renders go unchecked, which CI must not allow.
func helmBinary(t *testing.T) string {
	t.Helper()
	bin, err := clusterset.Tool("helm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("helm not built, so the chart is not rendered (make tools builds it; in CI this fails): %v", err)
	}
	return bin
}

// run runs helm and returns its standard output.
func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	t.Logf("helm %s: %v", args[0], time.Since(start).Round(time.Millisecond))
	return out
}

// TestLint runs `helm lint --strict` in every DNS mode.
func TestLint(t *testing.T) {
	bin := helmBinary(t)
	for _, mode := range []string{"standalone", "replace", "cluster-local"} {
		run(t, bin, "lint", "--strict", "--namespace", "mcs-system", ChartDir, "--set", "dns.mode="+mode)
	}
}

// TestSchemaRefusesUnknownMode checks that a DNS mode join does not know fails the render, rather than rendering
// a member without DNS.
func TestSchemaRefusesUnknownMode(t *testing.T) {
	bin := helmBinary(t)
	out, err := exec.Command(bin, "template", "mcs", ChartDir, "--set", "dns.mode=external").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dns/mode") {
		t.Errorf("helm template with dns.mode=external: err %v, want a schema error naming dns/mode; output:\n%s", err, out)
	}
}

// schedulingValues set every value that is not an image or a replica count.
const schedulingValues = `controller:
  resources: {requests: {cpu: 200m, memory: 256Mi}}
  leaseGrace: 45s
dns:
  resources: {limits: {memory: 1Gi}}
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: mcs, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: tier, operator: In, values: [infra]}]}]}}}
metrics: {enabled: true}
`

// schedulingPatch is schedulingValues as kustomize patches of the Deployment name: the controller's gets the lease
// grace and the metrics annotations too, and a base with tolerations keeps them.
func schedulingPatch(name, resources string, controller, baseTolerations bool) string {
	var ops []string
	ops = append(ops, "{op: replace, path: /spec/template/spec/containers/0/resources, value: "+resources+"}",
		"{op: add, path: /spec/template/spec/nodeSelector, value: {kubernetes.io/os: linux}}",
		"{op: add, path: /spec/template/spec/affinity, value: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: tier, operator: In, values: [infra]}]}]}}}}")
	toleration := "{key: dedicated, operator: Equal, value: mcs, effect: NoSchedule}"
	if baseTolerations {
		ops = append(ops, "{op: add, path: /spec/template/spec/tolerations/-, value: "+toleration+"}")
	} else {
		ops = append(ops, "{op: add, path: /spec/template/spec/tolerations, value: ["+toleration+"]}")
	}
	if controller {
		ops = append(ops, "{op: add, path: /spec/template/spec/containers/0/args/-, value: --lease-grace=45s}",
			`{op: add, path: /spec/template/metadata/annotations, value: {prometheus.io/path: /metrics, prometheus.io/port: "8080", prometheus.io/scrape: "true"}}`)
	}
	return fmt.Sprintf("  - target: {kind: Deployment, name: %s}\n    patch: |-\n      - %s\n", name, strings.Join(ops, "\n      - "))
}

// TestTemplateMatchesKustomize renders the chart with helm and the same member with a kustomize overlay of the
// bases, and compares the objects. The overlay's Namespace mcs-system is left out: the chart leaves it to helm
// install --create-namespace.
func TestTemplateMatchesKustomize(t *testing.T) {
	bin := helmBinary(t)
	for _, tc := range []struct {
		name    string
		args    []string
		values  string
		mode    string
		overlay string
		// noPolicyAPI installs on a cluster that serves no ValidatingAdmissionPolicy (before Kubernetes 1.30):
		// the chart leaves the policy out, as join does.
		noPolicyAPI bool
	}{
		{name: "defaults", mode: install.DNSStandalone},
		{name: "a cluster before Kubernetes 1.30", mode: install.DNSStandalone, noPolicyAPI: true},
		{name: "replace", args: []string{"--set", "dns.mode=replace"}, mode: install.DNSReplace},
		{name: "cluster-local", args: []string{"--set", "dns.mode=cluster-local"}, mode: install.DNSClusterLocal, overlay: "patches:\n" + install.ClusterLocalPatch},
		{
			name: "standalone images and replicas",
			args: []string{"--set", "image.controller=registry.example:5000/mirror/mcs-controller:v9.8.7",
				"--set", "image.dns=registry.example:5000/mirror/coredns@sha256:" + strings.Repeat("ab", 32),
				"--set", "controller.replicas=3", "--set", "dns.replicas=1"},
			mode: install.DNSStandalone,
			overlay: `images:
  - {name: ghcr.io/vksfleet/mcs-controller, newName: registry.example:5000/mirror/mcs-controller, newTag: v9.8.7}
  - {name: ghcr.io/vksfleet/coredns, newName: registry.example:5000/mirror/coredns, digest: "sha256:` + strings.Repeat("ab", 32) + `"}
replicas:
  - {name: mcs-controller, count: 3}
  - {name: mcs-dns, count: 1}
`,
		},
		{
			name: "replace replicas",
			args: []string{"--set", "dns.mode=replace", "--set", "dns.replicas=5", "--set", "controller.replicas=1"},
			mode: install.DNSReplace,
			overlay: `replicas:
  - {name: mcs-controller, count: 1}
  - {name: coredns, count: 5}
`,
		},
		{
			name:    "replace with every other value",
			args:    []string{"--set", "dns.mode=replace"},
			values:  schedulingValues,
			mode:    install.DNSReplace,
			overlay: "patches:\n" + schedulingPatch("mcs-controller", "{requests: {cpu: 200m, memory: 256Mi}}", true, false) + schedulingPatch("coredns", "{limits: {memory: 1Gi}}", false, true),
		},
		{
			name:    "cluster-local with every other value",
			args:    []string{"--set", "dns.mode=cluster-local"},
			values:  schedulingValues,
			mode:    install.DNSClusterLocal,
			overlay: "patches:\n" + install.ClusterLocalPatch + schedulingPatch("mcs-controller", "{requests: {cpu: 200m, memory: 256Mi}}", true, false),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "mcs", ChartDir, "--namespace", "mcs-system", "--include-crds"}, tc.args...)
			if !tc.noPolicyAPI {
				args = append(args, "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
			}
			if tc.values != "" {
				f := filepath.Join(t.TempDir(), "values.yaml")
				if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--values", f)
			}
			got := decode(t, "helm template", run(t, bin, args...))
			// The chart's own hooks and keep marks are tested apart (TestReplaceModeKeepsClusterDNS): what is left
			// is the bases'.
			withoutHelmMarks(got)

			bases, err := install.MemberBases(tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			var k strings.Builder
			k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
			for _, base := range bases {
				fmt.Fprintf(&k, "  - ../deploy/%s\n", base)
			}
			k.WriteString(tc.overlay)
			rendered, err := deploy.RenderOverlay(k.String())
			if err != nil {
				t.Fatalf("%v\n%s", err, k.String())
			}
			want := decode(t, "kustomize", rendered)
			ns := "Namespace//mcs-system"
			if _, ok := want[ns]; !ok {
				t.Fatalf("kustomize rendered no %s for the chart to leave out", ns)
			}
			delete(want, ns)
			if tc.mode == install.DNSReplace {
				// The replace mode's Corefile is the cluster's own, with our block added by the hooks once our image
				// runs, or the base's applied by the backup hook where the cluster has none.
				delete(want, "ConfigMap/kube-system/coredns")
			}
			if tc.noPolicyAPI {
				for key := range want {
					if strings.HasPrefix(key, "ValidatingAdmissionPolicy") {
						delete(want, key)
					}
				}
				for key := range got {
					if strings.HasPrefix(key, "ValidatingAdmissionPolicy") {
						t.Errorf("helm rendered %s for a cluster that does not serve it", key)
					}
				}
			}

			for _, key := range slices.Sorted(maps.Keys(want)) {
				g, ok := got[key]
				switch {
				case !ok:
					t.Errorf("helm rendered no %s", key)
				case !reflect.DeepEqual(g, want[key]):
					gy, _ := yaml.Marshal(g)
					wy, _ := yaml.Marshal(want[key])
					t.Errorf("%s differs:\nhelm:\n%s\nkustomize:\n%s", key, gy, wy)
				}
			}
			for key := range got {
				if _, ok := want[key]; !ok {
					t.Errorf("helm rendered %s, which kustomize does not", key)
				}
			}
		})
	}
}

// withoutHelmMarks removes from a render what is the chart's own: its hook objects, and the keep policy of the
// objects the replace mode takes over.
func withoutHelmMarks(objs map[string]map[string]any) {
	for key, obj := range objs {
		annotations := annotationsOf(obj)
		if _, hook := annotations["helm.sh/hook"]; hook {
			delete(objs, key)
			continue
		}
		delete(annotations, keepPolicy)
		if meta, _ := obj["metadata"].(map[string]any); len(annotations) == 0 && meta != nil {
			delete(meta, "annotations")
		}
	}
}

// annotationsOf is an object's annotations, nil when it has none.
func annotationsOf(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	return annotations
}

// decode reads a multi-document YAML stream into objects keyed by kind, namespace and name.
func decode(t *testing.T, what string, b []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		kind, _ := obj["kind"].(string)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		key := kind + "/" + ns + "/" + name
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered %s twice", what, key)
		}
		objs[key] = obj
	}
	if len(objs) == 0 {
		t.Fatalf("%s rendered nothing", what)
	}
	return objs
}

// TestServiceMonitors: with metrics.serviceMonitor.enabled the chart renders the monitoring component's
// ServiceMonitors of the DNS mode, each labelled so that kube-prometheus-stack's default selector (release=<its
// release name>) finds them, and with the labels the values give instead.
func TestServiceMonitors(t *testing.T) {
	bin := helmBinary(t)
	for _, tc := range []struct {
		mode, release string
		args          []string
		want          []string
	}{
		{install.DNSStandalone, "kube-prometheus-stack", nil, []string{"mcs-controller", "mcs-dns"}},
		{install.DNSReplace, "kube-prometheus-stack", nil, []string{"mcs-controller", "mcs-coredns"}},
		{install.DNSClusterLocal, "prom", []string{"--set", "metrics.serviceMonitor.labels.release=prom"}, []string{"mcs-controller"}},
	} {
		args := append([]string{"template", "mcs", ChartDir, "--namespace", "mcs-system", "--set", "dns.mode=" + tc.mode,
			"--set", "metrics.serviceMonitor.enabled=true"}, tc.args...)
		var got []string
		for key, obj := range decode(t, "helm", run(t, bin, args...)) {
			if !strings.HasPrefix(key, "ServiceMonitor/") {
				continue
			}
			meta := obj["metadata"].(map[string]any)
			labels, _ := meta["labels"].(map[string]any)
			if labels["release"] != tc.release || labels["app.kubernetes.io/name"] == nil {
				t.Errorf("%s, mode %s: labels %v, want the base's and release=%s", key, tc.mode, labels, tc.release)
			}
			got = append(got, meta["name"].(string))
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("mode %s: ServiceMonitors %v, want %v", tc.mode, got, tc.want)
		}
	}
}

// TestClusterDomain: controller.clusterDomain sets the controller's --cluster-domain, as join --cluster-domain does.
func TestClusterDomain(t *testing.T) {
	bin := helmBinary(t)
	objs := decode(t, "helm", run(t, bin, "template", "mcs", ChartDir, "--namespace", "mcs-system", "--set", "controller.clusterDomain=corp.example"))
	d, ok := objs["Deployment/mcs-system/mcs-controller"]
	if !ok {
		t.Fatal("no controller Deployment")
	}
	b, err := yaml.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "- --cluster-domain=corp.example\n") || strings.Contains(string(b), "--cluster-domain=cluster.local") {
		t.Errorf("the controller's arguments do not set --cluster-domain=corp.example alone:\n%s", b)
	}
}

// TestAppVersion packages the chart at another appVersion, as a release of that version does: with no image in
// the values, both Deployments run our images at it, and an image the values name wins.
func TestAppVersion(t *testing.T) {
	bin := helmBinary(t)
	const version = "v9.8.7-3-gb35ea41"
	dir := t.TempDir()
	run(t, bin, "package", ChartDir, "--app-version", version, "--destination", dir)
	pkgs, err := filepath.Glob(filepath.Join(dir, "*.tgz"))
	if err != nil || len(pkgs) != 1 {
		t.Fatalf("helm package wrote %v (%v), want one chart", pkgs, err)
	}
	for _, tc := range []struct {
		args []string
		want map[string]string // image by Deployment
	}{
		{[]string{"--set", "dns.mode=standalone"}, map[string]string{
			"Deployment/mcs-system/mcs-controller": "ghcr.io/vksfleet/mcs-controller:" + version,
			"Deployment/mcs-system/mcs-dns":        "ghcr.io/vksfleet/coredns:" + version}},
		{[]string{"--set", "dns.mode=replace", "--set", "image.dns=mirror.example/coredns:mine"}, map[string]string{
			"Deployment/mcs-system/mcs-controller": "ghcr.io/vksfleet/mcs-controller:" + version,
			"Deployment/kube-system/coredns":       "mirror.example/coredns:mine"}},
	} {
		got := map[string]string{}
		for key, obj := range decode(t, "helm", run(t, bin, append([]string{"template", "mcs", pkgs[0], "--namespace", "mcs-system"}, tc.args...)...)) {
			if !strings.HasPrefix(key, "Deployment/") {
				continue
			}
			spec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			got[key] = spec["containers"].([]any)[0].(map[string]any)["image"].(string)
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("helm template %v: images %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestReplaceModeKeepsClusterDNS: in the replace mode, the objects the chart takes over from the cluster's own DNS,
// kube-dns first, carry the keep policy, so that helm uninstall leaves the cluster its DNS; the chart renders no
// Corefile of its own, which stock CoreDNS replicas could read before our image runs; and hooks keep a copy of the
// original, add our block to the cluster's Corefile, and put the original back. The other modes have neither.
func TestReplaceModeKeepsClusterDNS(t *testing.T) {
	bin := helmBinary(t)
	for _, mode := range install.DNSModes {
		objs := decode(t, "helm", run(t, bin, "template", "mcs", ChartDir, "--namespace", "mcs-system", "--set", "dns.mode="+mode))
		var kept, hooks []string
		for key, obj := range objs {
			annotations := annotationsOf(obj)
			if annotations[keepPolicy] != nil {
				if annotations[keepPolicy] != "keep" {
					t.Errorf("mode %s: %s has %s %v", mode, key, keepPolicy, annotations[keepPolicy])
				}
				kept = append(kept, key)
			}
			if annotations["helm.sh/hook"] != nil {
				hooks = append(hooks, key)
			}
		}
		slices.Sort(kept)
		slices.Sort(hooks)
		var wantKept, wantHooks []string
		if mode == install.DNSReplace {
			wantKept = []string{"ClusterRole//system:coredns", "ClusterRoleBinding//system:coredns", "Deployment/kube-system/coredns",
				"Service/kube-system/kube-dns", "ServiceAccount/kube-system/coredns"}
			wantHooks = []string{"Job/mcs-system/mcs-dns-backup", "Job/mcs-system/mcs-dns-restore", "Job/mcs-system/mcs-dns-serve",
				"Role/kube-system/mcs-dns-hook", "RoleBinding/kube-system/mcs-dns-hook", "ServiceAccount/mcs-system/mcs-dns-hook"}
		}
		if !slices.Equal(kept, wantKept) {
			t.Errorf("mode %s: kept on uninstall %v, want %v", mode, kept, wantKept)
		}
		if !slices.Equal(hooks, wantHooks) {
			t.Errorf("mode %s: hooks %v, want %v", mode, hooks, wantHooks)
		}
		if _, ok := objs["ConfigMap/kube-system/coredns"]; ok {
			t.Errorf("mode %s renders the ConfigMap kube-system/coredns", mode)
		}
	}
}

// TestReplaceHooks checks the replace mode's hooks: each Job runs, at the events it is for, a subcommand that
// kubectl-mcs has, from the controller's image (the values' or the appVersion's), as the hooks' ServiceAccount,
// whose rights are a Role of kube-system's alone; and the controller's image holds kubectl-mcs where they run it.
func TestReplaceHooks(t *testing.T) {
	bin := helmBinary(t)
	if !slices.ContainsFunc(images.Product, func(im images.Image) bool {
		return im.Name == "mcs-controller" && slices.ContainsFunc(im.Binaries, func(b images.Binary) bool {
			return b.Package == "vksfleet.dev/fleet/cmd/kubectl-mcs" && "/"+b.Name == kubectlMCS
		})
	}) {
		t.Errorf("the mcs-controller image (build/images) holds no kubectl-mcs at %s", kubectlMCS)
	}
	tree := cli.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard})
	for _, tc := range []struct {
		args  []string
		image string
	}{
		{nil, "ghcr.io/vksfleet/mcs-controller:" + appVersion(t)},
		{[]string{"--set", "image.controller=mirror.example/mcs-controller:mine"}, "mirror.example/mcs-controller:mine"},
	} {
		args := append([]string{"template", "mcs", ChartDir, "--namespace", "mcs-system", "--set", "dns.mode=replace"}, tc.args...)
		objs := decode(t, "helm", run(t, bin, args...))
		for _, want := range hookJobs {
			key := "Job/mcs-system/" + want.name
			obj, ok := objs[key]
			if !ok {
				t.Errorf("no %s", key)
				continue
			}
			if got := annotationsOf(obj)["helm.sh/hook"]; got != want.events {
				t.Errorf("%s runs on %v, want %s", key, got, want.events)
			}
			var job batchv1.Job
			remarshal(t, obj, &job)
			pod := job.Spec.Template.Spec
			if len(pod.Containers) != 1 || pod.ServiceAccountName != hookName || pod.RestartPolicy != corev1.RestartPolicyNever {
				t.Fatalf("%s: pod %+v", key, pod)
			}
			c := pod.Containers[0]
			if c.Image != tc.image || !slices.Equal(c.Command, append([]string{kubectlMCS}, want.args...)) {
				t.Errorf("%s runs %s %v, want %s %s %v", key, c.Image, c.Command, tc.image, kubectlMCS, want.args)
			}
			sub, rest, err := tree.Find(want.args)
			if err != nil || sub == tree || !slices.Equal(rest, want.args[len(want.args)-len(rest):]) || sub.Name() != want.args[1] {
				t.Errorf("kubectl-mcs has no subcommand %v: %v %v", want.args, sub.Name(), err)
			} else if err := sub.ParseFlags(rest); err != nil {
				t.Errorf("kubectl-mcs %v: %v", want.args, err)
			}
		}
		var binding rbacv1.RoleBinding
		remarshal(t, objs["RoleBinding/kube-system/mcs-dns-hook"], &binding)
		if binding.RoleRef.Kind != "Role" || len(binding.Subjects) != 1 || binding.Subjects[0].Namespace != "mcs-system" || binding.Subjects[0].Name != hookName {
			t.Errorf("the hooks' RoleBinding: %+v", binding)
		}
		for key := range objs {
			if strings.HasPrefix(key, "ClusterRole") && strings.Contains(key, hookName) {
				t.Errorf("the hooks hold a cluster-wide right: %s", key)
			}
		}
	}
}

// appVersion is the chart's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ChartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	return chart.AppVersion
}

// remarshal converts a decoded object into a typed one.
func remarshal(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

// TestNotesForwardBlock runs the commands the standalone mode's NOTES give: with the Service's address, they print
// forward.server's block with that address, which CoreDNS's parser reads as a forward of clusterset.local to it;
// without one, they fail and print nothing, rather than a block whose placeholder would stop CoreDNS at its next
// start. No other mode's notes name the placeholder either.
func TestNotesForwardBlock(t *testing.T) {
	notes, err := os.ReadFile(filepath.Join(ChartDir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(notes), forwardAddress) || strings.Contains(string(notes), "forward.server") {
		t.Errorf("NOTES.txt names the placeholder %s or its file:\n%s", forwardAddress, notes)
	}
	var script []string
	for l := range strings.Lines(string(notes)) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "ip=") || strings.HasPrefix(l, "printf ") {
			script = append(script, strings.ReplaceAll(l, "{{ .Release.Namespace }}", "mcs-system"))
		}
	}
	if len(script) != 2 {
		t.Fatalf("NOTES.txt: want the ip= and printf lines, got %q", script)
	}
	for _, tc := range []struct{ ip, want string }{{"10.96.0.99", "10.96.0.99"}, {"", ""}} {
		// kubectl prints the Service's ClusterIP, or nothing before it has one.
		cmd := exec.Command("bash", "-c", fmt.Sprintf("set -e\nkubectl() { printf %%s %q; }\n%s", tc.ip, strings.Join(script, "\n")))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if tc.want == "" {
			if err == nil || len(out) > 0 {
				t.Errorf("without an address the commands print %q (%v), want a failure and nothing", out, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %s", err, stderr.String())
		}
		blocks, err := caddyfile.Parse("Corefile", bytes.NewReader(out), nil)
		if err != nil || len(blocks) != 1 || !slices.Equal(blocks[0].Keys, []string{"clusterset.local:53"}) {
			t.Fatalf("the commands print %q: %v, want one server block of clusterset.local:53", out, err)
		}
		var args []string
		for _, tok := range blocks[0].Tokens["forward"] {
			args = append(args, tok.Text)
		}
		if !slices.Equal(args, []string{"forward", ".", tc.want}) {
			t.Errorf("the block forwards %v, want to %s:\n%s", args, tc.want, out)
		}
		if !strings.HasPrefix(string(out), "# BEGIN vksfleet multicluster") || !strings.HasSuffix(string(out), "# END vksfleet multicluster\n") {
			t.Errorf("the block lacks the markers unjoin finds it by:\n%s", out)
		}
	}
}
