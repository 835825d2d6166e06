package install

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubefake "k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"vksfleet.dev/fleet/build/deploy"
)

// customCorefile is kubeadm's Corefile as an operator changed it: a rewrite rule in the cluster's server block, and
// a stub domain of its own. Every path of ours must keep both, and give them back.
const customCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    rewrite name exact alias.kube-system.svc.cluster.local kube-dns.kube-system.svc.cluster.local
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
example.internal:53 {
    errors
    forward . 10.9.9.9
}
`

// The cluster's own CoreDNS image, whose binary has no multicluster plugin, and ours.
const (
	stockImage = "registry.k8s.io/coredns/coredns:v1.12.0"
	ourImage   = "ghcr.io/vksfleet/coredns:v9.9.9"
)

// block is a file of build/deploy, a Corefile block.
func block(t *testing.T, name string) string {
	t.Helper()
	b, err := deploy.File(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// forwardTo is the standalone mode's forward block, to ip.
func forwardTo(t *testing.T, ip string) string {
	return strings.ReplaceAll(block(t, forwardBlock), forwardAddress, ip)
}

// baseCorefileText is the replace base's Corefile, Corefile.example.
func baseCorefileText(t *testing.T) string {
	t.Helper()
	o, err := baseCorefileObject()
	if err != nil {
		t.Fatal(err)
	}
	return o.Object["data"].(map[string]any)[corefileKey].(string)
}

func TestLoadsPlugin(t *testing.T) {
	for _, tc := range []struct {
		name, corefile string
		multicluster   bool
		whole          bool
		wantErr        bool
	}{
		{name: "the cluster's own", corefile: customCorefile},
		{name: "ours whole", corefile: baseCorefileText(t), multicluster: true, whole: true},
		{name: "the cluster's own with our block", corefile: customCorefile + block(t, replaceBlock), multicluster: true},
		{name: "the cluster's own with the forward block", corefile: customCorefile + forwardTo(t, "10.0.0.9")},
		{name: "named in a comment only", corefile: ".:53 {\n    # multicluster clusterset.local\n    errors\n}\n"},
		{name: "named as a zone only", corefile: "multicluster.example:53 {\n    errors\n}\n"},
		{name: "empty", corefile: ""},
		{name: "does not parse", corefile: ".:53 {\n    errors\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loads, err := loadsPlugin(tc.corefile, multiclusterPlugin)
			if (err != nil) != tc.wantErr || loads != tc.multicluster {
				t.Errorf("loadsPlugin = %v, %v; want %v, error %v", loads, err, tc.multicluster, tc.wantErr)
			}
			whole, err := ours(tc.corefile)
			if (err != nil) != tc.wantErr || whole != tc.whole {
				t.Errorf("ours = %v, %v; want %v, error %v", whole, err, tc.whole, tc.wantErr)
			}
		})
	}
}

// fakeDNS is a cluster's CoreDNS in a fake API server: the ConfigMap and Deployment coredns in kube-system, pods of
// the Deployment that run its image (rollOut replaces them, as a rollout would, when the Deployment is updated), and
// their metrics through the pod proxy, in which every running replica has reloaded the Corefile of the moment. Each
// write checks what keeps the cluster's DNS up: a Corefile that loads multicluster is written only while every pod
// runs our image, and the Deployment gets an image without the plugin only while the Corefile loads none.
type fakeDNS struct {
	t    *testing.T
	c    client.WithWatch
	kube *kubefake.Clientset
	// client is what the code under test writes through.
	client client.Client
	mu     sync.Mutex
	// writes are the writes to the cluster's DNS, in order: "Corefile" or "Deployment <image>".
	writes []string
	// podLists counts the lists of pods, the waits' polls.
	podLists atomic.Int32
	// rollOnUpdate makes a Deployment update roll its pods out at once.
	rollOnUpdate bool
	seq          int
}

// newFakeDNS is a fake cluster with objs and, when corefile is not empty, the ConfigMap coredns with it; with image
// not empty, the Deployment coredns running it, rolled out to two pods.
func newFakeDNS(t *testing.T, corefile, image string, objs ...client.Object) *fakeDNS {
	t.Helper()
	f := &fakeDNS{t: t, kube: kubefake.NewClientset(), rollOnUpdate: true}
	if corefile != "" {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: coreDNSConfigMap}, Data: map[string]string{corefileKey: corefile}})
	}
	if image != "" {
		objs = append(objs, kubeadmDeployment(image))
	}
	f.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	f.client = interceptor.NewClient(f.c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			f.check(ctx, obj)
			if err := c.Update(ctx, obj, opts...); err != nil {
				return err
			}
			if d, ok := obj.(*appsv1.Deployment); ok && f.rollOnUpdate {
				f.rollOut(ctx, d.Spec.Template.Spec.Containers[0].Image)
			}
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*corev1.PodList); ok {
				f.podLists.Add(1)
			}
			return c.List(ctx, list, opts...)
		},
	})
	f.kube.PrependProxyReactor("pods", func(a clienttesting.Action) (bool, restclient.ResponseWrapper, error) {
		sum := sha512.Sum512([]byte(f.corefile()))
		return true, metrics(fmt.Sprintf("%shash=\"sha512\",value=\"%s\"} 1\n", reloadMetric, hex.EncodeToString(sum[:]))), nil
	})
	if image != "" {
		f.rollOut(context.Background(), image)
	}
	return f
}

// metrics is a pod's metrics page, as the pod proxy returns it.
type metrics string

func (m metrics) DoRaw(context.Context) ([]byte, error) { return []byte(m), nil }
func (m metrics) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(m))), nil
}

// noMetrics is the pod proxy's answer for a pod that serves no metrics (yet).
type noMetrics struct{}

func (noMetrics) DoRaw(context.Context) ([]byte, error) {
	return nil, errors.New("error trying to reach service: dial tcp: connect: connection refused")
}
func (n noMetrics) Stream(ctx context.Context) (io.ReadCloser, error) {
	_, err := n.DoRaw(ctx)
	return nil, err
}

// kubeadmDeployment is kubeadm's Deployment coredns, with image.
func kubeadmDeployment(image string) *appsv1.Deployment {
	labels := map[string]string{"k8s-app": "kube-dns"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: dnsDeployment, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: "coredns",
				Containers: []corev1.Container{{Name: coreDNSContainer, Image: image, Args: []string{"-conf", "/etc/coredns/Corefile"},
					VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}}}},
				Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: coreDNSConfigMap},
					Items:                []corev1.KeyToPath{{Key: corefileKey, Path: corefileKey}},
				}}}},
			}},
		},
	}
}

// corefile is the live Corefile.
func (f *fakeDNS) corefile() string {
	var cm corev1.ConfigMap
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm); err != nil {
		return ""
	}
	return cm.Data[corefileKey]
}

// podImages are the images the pods of the Deployment run.
func (f *fakeDNS) podImages(ctx context.Context) []string {
	var pods corev1.PodList
	if err := f.c.List(ctx, &pods, client.InNamespace(dnsNamespace)); err != nil {
		f.t.Error(err)
	}
	var images []string
	for _, p := range pods.Items {
		images = append(images, p.Spec.Containers[0].Image)
	}
	return images
}

// check records a write to the cluster's DNS, and fails the test if it could stop a replica: a Corefile that loads
// multicluster while a pod runs another image, or an image without the plugin while the Corefile loads it.
func (f *fakeDNS) check(ctx context.Context, obj client.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		if o.Name != coreDNSConfigMap {
			return
		}
		f.writes = append(f.writes, "Corefile")
		if loads, _ := loadsPlugin(o.Data[corefileKey], multiclusterPlugin); !loads {
			return
		}
		for _, image := range f.podImages(ctx) {
			if image != ourImage {
				f.t.Errorf("a Corefile that loads multicluster is written while a pod runs %s", image)
			}
		}
	case *appsv1.Deployment:
		image := o.Spec.Template.Spec.Containers[0].Image
		f.writes = append(f.writes, "Deployment "+image)
		if loads, _ := loadsPlugin(f.corefile(), multiclusterPlugin); loads && image != ourImage {
			f.t.Errorf("the Deployment gets %s while the Corefile loads multicluster", image)
		}
	}
}

// rollOut replaces the Deployment's pods by running ones of image, and marks it rolled out.
func (f *fakeDNS) rollOut(ctx context.Context, image string) {
	f.t.Helper()
	var pods corev1.PodList
	if err := f.c.List(ctx, &pods, client.InNamespace(dnsNamespace)); err != nil {
		f.t.Fatal(err)
	}
	for i := range pods.Items {
		if err := f.c.Delete(ctx, &pods.Items[i]); err != nil {
			f.t.Fatal(err)
		}
	}
	var d appsv1.Deployment
	if err := f.c.Get(ctx, coreDNSObject, &d); err != nil {
		f.t.Fatal(err)
	}
	n := ptr.Deref(d.Spec.Replicas, 1)
	for range n {
		f.seq++
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: fmt.Sprintf("coredns-%d", f.seq), Labels: d.Spec.Template.Labels},
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
		}
		if err := f.c.Create(ctx, p); err != nil {
			f.t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		if err := f.c.Status().Update(ctx, p); err != nil {
			f.t.Fatal(err)
		}
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, AvailableReplicas: n, ReadyReplicas: n}
	if err := f.c.Status().Update(ctx, &d); err != nil {
		f.t.Fatal(err)
	}
}

// backup is the live DNSBackup's data, nil when absent.
func (f *fakeDNS) backup() map[string]string {
	var cm corev1.ConfigMap
	if err := f.c.Get(context.Background(), backupKey, &cm); err != nil {
		if !apierrors.IsNotFound(err) {
			f.t.Fatal(err)
		}
		return nil
	}
	return cm.Data
}

// deployment is the live Deployment coredns.
func (f *fakeDNS) deployment() *appsv1.Deployment {
	var d appsv1.Deployment
	if err := f.c.Get(context.Background(), coreDNSObject, &d); err != nil {
		f.t.Fatal(err)
	}
	return &d
}

// TestBackupDNS: the first backup copies the cluster's CoreDNS as it is, without a block of ours; a second keeps
// the first original whatever changed since, and only notes that the replace mode took the Deployment over; there
// is no backup where nothing of the cluster's own is left.
func TestBackupDNS(t *testing.T) {
	ctx := context.Background()
	template, err := json.Marshal(kubeadmDeployment(stockImage).Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	original := map[string]string{backupCorefile: customCorefile, backupImage: stockImage, backupReplicas: "3", backupTemplate: string(template)}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for key, val := range original {
			m[key] = val
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name           string
		corefile       string
		image          string
		replaceFirst   bool
		replaceSecond  bool
		want           map[string]string
		wantAfterTwice map[string]string
	}{
		{name: "standalone", corefile: customCorefile, image: stockImage, want: original, wantAfterTwice: original},
		{name: "replace", corefile: customCorefile, image: stockImage, replaceFirst: true, want: with(backupReplaced, "true"), wantAfterTwice: with(backupReplaced, "true")},
		{name: "standalone, then replace", corefile: customCorefile, image: stockImage, replaceSecond: true, want: original, wantAfterTwice: with(backupReplaced, "true")},
		{name: "a block of an earlier join's is not the original's", corefile: customCorefile + forwardTo(t, "10.0.0.9"), image: stockImage, want: original, wantAfterTwice: original},
		{name: "a Corefile ours whole keeps nothing", corefile: baseCorefileText(t), image: ourImage},
		{name: "no CoreDNS keeps nothing"},
		{name: "a Corefile without a Deployment", corefile: customCorefile, want: map[string]string{backupCorefile: customCorefile}, wantAfterTwice: map[string]string{backupCorefile: customCorefile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDNS(t, tc.corefile, tc.image)
			if _, err := backupDNS(ctx, f.client, tc.replaceFirst); err != nil {
				t.Fatal(err)
			}
			if got := f.backup(); !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("backup %v, want %v", got, tc.want)
			}
			// What changes after the first backup is not the original.
			if tc.corefile != "" {
				var cm corev1.ConfigMap
				if err := f.c.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm); err != nil {
					t.Fatal(err)
				}
				cm.Data[corefileKey] += "# changed\n"
				if err := f.c.Update(ctx, &cm); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := backupDNS(ctx, f.client, tc.replaceSecond); err != nil {
				t.Fatal(err)
			}
			if got := f.backup(); !apiequality.Semantic.DeepEqual(got, tc.wantAfterTwice) {
				t.Errorf("backup after a second run %v, want %v", got, tc.wantAfterTwice)
			}
		})
	}
}

// TestAddZone: our block goes into the cluster's own Corefile, every line of which stays, in place of a block of
// ours; a Corefile ours whole serves the zone already.
func TestAddZone(t *testing.T) {
	ctx := context.Background()
	zone := block(t, replaceBlock)
	base := baseCorefileText(t)
	for _, tc := range []struct {
		name, corefile, want string
		changed              bool
	}{
		{"the cluster's own", customCorefile, customCorefile + zone, true},
		{"already there", customCorefile + zone, customCorefile + zone, false},
		{"in place of the standalone mode's forward", customCorefile + forwardTo(t, "10.0.0.9"), customCorefile + zone, true},
		{"ours whole", base, base, false},
		{"ours whole loses a forward of ours", base + forwardTo(t, "10.0.0.9"), base, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDNS(t, tc.corefile, ourImage)
			_, changed, err := addZone(ctx, f.client)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.corefile(); got != tc.want || changed != tc.changed {
				t.Errorf("Corefile changed %v:\n%s\nwant changed %v:\n%s", changed, got, tc.changed, tc.want)
			}
		})
	}
}

// TestServeWaitsForImage: serve adds our block to the Corefile only once every pod of the Deployment runs our
// image, not as soon as the Deployment names it, and waits until the replicas reloaded it.
func TestServeWaitsForImage(t *testing.T) {
	ctx := context.Background()
	f := newFakeDNS(t, customCorefile, stockImage)
	f.rollOnUpdate = false
	d := f.deployment()
	d.Spec.Template.Spec.Containers[0].Image = ourImage
	if err := f.client.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- serve(ctx, steps{&out}, f.kube, f.client, time.Minute) }()
	// serve polls the pods, which still run the stock image.
	for f.podLists.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("serve returned while the pods run the stock image: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got := f.corefile(); got != customCorefile {
		t.Fatalf("the Corefile changed before the rollout:\n%s", got)
	}
	f.rollOut(ctx, ourImage)
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got, want := f.corefile(), customCorefile+block(t, replaceBlock); got != want {
		t.Errorf("Corefile:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(out.String(), "all 3 replicas run the new Corefile") {
		t.Errorf("serve did not wait for the replicas to reload:\n%s", out.String())
	}
}

// TestReplicasBefore: a replica whose metrics do not answer yet while the others' do (it started a moment ago) is
// read again before the Corefile changes, so that its reload can be confirmed; where none answer, nothing waits.
func TestReplicasBefore(t *testing.T) {
	ctx := context.Background()
	f := newFakeDNS(t, customCorefile, ourImage)
	var pods corev1.PodList
	if err := f.c.List(ctx, &pods); err != nil || len(pods.Items) < 2 {
		t.Fatalf("pods %d, %v", len(pods.Items), err)
	}
	late := pods.Items[0].Name
	var refusals atomic.Int32
	var all atomic.Bool
	f.kube.PrependProxyReactor("pods", func(a clienttesting.Action) (bool, restclient.ResponseWrapper, error) {
		if name := a.(clienttesting.ProxyGetAction).GetName(); all.Load() || name == late && refusals.Add(1) <= 2 {
			return true, noMetrics{}, nil
		}
		return false, nil, nil
	})
	got, err := replicasBefore(ctx, f.kube, f.client)
	if err != nil {
		t.Fatal(err)
	}
	for pod, r := range got {
		if !r.readable || r.reload == "" {
			t.Errorf("replica %s read as %+v", pod, r)
		}
	}
	if n := refusals.Load(); n < 3 {
		t.Errorf("%s's metrics read %d times, want again until they answered", late, n)
	}

	all.Store(true)
	start := time.Now()
	if got, err = replicasBefore(ctx, f.kube, f.client); err != nil || len(got) != len(pods.Items) {
		t.Fatalf("no replica readable: %v, %v", got, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("waited %s where no replica serves metrics", d)
	}
}

// TestReplaceAndRestore runs the replace mode's steps on a cluster's CoreDNS as join, the chart's hooks and unjoin
// run them (backup, our image, our block; then restore), and checks, at each write, that no replica could be left
// with a Corefile its binary cannot read (fakeDNS.check); after the restore, the Corefile is the cluster's own with
// an edit its owner made meanwhile, the Deployment its own, and the backup gone.
func TestReplaceAndRestore(t *testing.T) {
	ctx := context.Background()
	f := newFakeDNS(t, customCorefile, stockImage)
	original := f.deployment().Spec
	if _, err := prepareDNS(ctx, f.client, true); err != nil {
		t.Fatal(err)
	}
	if got := f.corefile(); got != customCorefile {
		t.Fatalf("the backup step changed the cluster's own Corefile:\n%s", got)
	}
	// The replace mode's Deployment, as join applies it and the chart installs it.
	d := f.deployment()
	d.Spec.Replicas = ptr.To[int32](2)
	d.Spec.Template.Spec.Containers[0].Image = ourImage
	d.Spec.Template.Spec.Volumes[0].Name = "config"
	d.Spec.Template.Spec.Containers[0].VolumeMounts[0].Name = "config"
	if err := f.client.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := serve(ctx, steps{io.Discard}, f.kube, f.client, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The cluster's owner edits their Corefile meanwhile.
	var cm corev1.ConfigMap
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	const edit = "other.internal:53 {\n    forward . 10.9.9.10\n}\n"
	cm.Data[corefileKey] = strings.Replace(cm.Data[corefileKey], blockBegin, edit+blockBegin, 1)
	if err := f.c.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}

	did, err := restoreDNS(ctx, f.client, f.kube, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.corefile(), customCorefile+edit; got != want {
		t.Errorf("restored Corefile:\n%s\nwant:\n%s", got, want)
	}
	if got := f.deployment().Spec; !apiequality.Semantic.DeepEqual(got, original) {
		t.Errorf("restored Deployment %+v, want %+v", got, original)
	}
	if f.backup() != nil {
		t.Error("the backup is still there")
	}
	want := []string{"Deployment " + ourImage, "Corefile", "Corefile", "Deployment " + stockImage}
	if !apiequality.Semantic.DeepEqual(f.writes, want) {
		t.Errorf("writes %v, want %v", f.writes, want)
	}
	if !strings.Contains(did, "all 2 replicas run the new Corefile") {
		t.Errorf("restore did not wait for the replicas to reload before the image: %s", did)
	}
}

// TestRestoreDNS: what a restore puts back, by the backup and the live CoreDNS.
func TestRestoreDNS(t *testing.T) {
	ctx := context.Background()
	template, err := json.Marshal(kubeadmDeployment(stockImage).Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	zone := block(t, replaceBlock)
	const upgraded = "registry.k8s.io/coredns/coredns:v1.13.0"
	for _, tc := range []struct {
		name      string
		corefile  string
		image     string
		backup    map[string]string
		want      string
		wantImage string
		wantErr   string
	}{{
		name: "standalone leaves an upgrade of the cluster's own", corefile: customCorefile + forwardTo(t, "10.0.0.9"), image: upgraded,
		backup: map[string]string{backupCorefile: customCorefile, backupImage: stockImage, backupTemplate: string(template), backupReplicas: "3"},
		want:   customCorefile, wantImage: upgraded,
	}, {
		name: "replace", corefile: customCorefile + zone, image: ourImage,
		backup: map[string]string{backupCorefile: customCorefile, backupImage: stockImage, backupTemplate: string(template), backupReplicas: "3", backupReplaced: "true"},
		want:   customCorefile, wantImage: stockImage,
	}, {
		name: "a Corefile ours whole gets the original", corefile: baseCorefileText(t), image: ourImage,
		backup: map[string]string{backupCorefile: customCorefile, backupImage: stockImage, backupTemplate: string(template), backupReplicas: "3", backupReplaced: "true"},
		want:   customCorefile, wantImage: stockImage,
	}, {
		name: "the script's copy of an earlier release: the image alone", corefile: customCorefile + zone, image: ourImage,
		backup: map[string]string{backupCorefile: customCorefile, backupImage: stockImage, backupReplaced: "true"},
		want:   customCorefile, wantImage: stockImage,
	}, {
		name: "no backup: nothing changes", corefile: baseCorefileText(t), image: ourImage,
		want: baseCorefileText(t), wantImage: ourImage,
	}, {
		name: "ours whole without an original Corefile", corefile: baseCorefileText(t), image: ourImage,
		backup:  map[string]string{backupImage: stockImage, backupReplaced: "true"},
		wantErr: "keeps no original",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.backup != nil {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: DNSBackup}, Data: tc.backup})
			}
			f := newFakeDNS(t, tc.corefile, tc.image, objs...)
			_, err := restoreDNS(ctx, f.client, f.kube, time.Minute)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("restoreDNS: %v, want an error saying %q", err, tc.wantErr)
				}
				if f.backup() == nil {
					t.Error("the backup went with a failed restore")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := f.corefile(); got != tc.want {
				t.Errorf("Corefile:\n%s\nwant:\n%s", got, tc.want)
			}
			if got := f.deployment().Spec.Template.Spec.Containers[0].Image; got != tc.wantImage {
				t.Errorf("image %s, want %s", got, tc.wantImage)
			}
			if f.backup() != nil {
				t.Error("the backup is still there")
			}
		})
	}
}

// TestInstallMemberLeavesCorefile: join's apply of the replace mode (here its dry run's plan) leaves the cluster's
// ConfigMap coredns alone, which it edits only once our image runs (serve), and gives the Deployment our image.
func TestInstallMemberLeavesCorefile(t *testing.T) {
	ctx := context.Background()
	c := newFake(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: coreDNSConfigMap}, Data: map[string]string{corefileKey: customCorefile}})
	p := &plan{}
	if _, err := installMember(ctx, &writer{Client: c, cluster: "member", force: true, plan: p}, JoinOptions{DNS: DNSReplace, DNSImage: ourImage}); err != nil {
		t.Fatal(err)
	}
	deployment := false
	for _, ch := range p.changes {
		switch ch.kind + " " + ch.name {
		case "ConfigMap kube-system/coredns":
			t.Errorf("join applies the ConfigMap kube-system/coredns with its Deployment: %s", ch.what())
		case "Deployment kube-system/coredns":
			deployment = true
			if !strings.Contains(fmt.Sprint(ch.after), ourImage) {
				t.Errorf("the Deployment is not given %s: %v", ourImage, ch.after)
			}
		}
	}
	if !deployment {
		t.Error("join applies no Deployment kube-system/coredns")
	}
}

// TestBaseCorefile: a cluster with no Corefile of its own gets the replace base's, and one ours whole this
// release's; the cluster's own stays.
func TestBaseCorefile(t *testing.T) {
	ctx := context.Background()
	base := baseCorefileText(t)
	for _, tc := range []struct{ name, corefile, want string }{
		{"none", "", base},
		{"an earlier release's", strings.Replace(base, "ttl 5", "ttl 7", 1), base},
		{"the cluster's own", customCorefile, customCorefile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.corefile != "" {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: dnsNamespace, Name: coreDNSConfigMap}, Data: map[string]string{corefileKey: tc.corefile}})
			}
			c := newFake(objs...)
			if _, err := baseCorefile(ctx, c); err != nil {
				t.Fatal(err)
			}
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: dnsNamespace, Name: coreDNSConfigMap}, &cm); err != nil {
				t.Fatal(err)
			}
			if cm.Data[corefileKey] != tc.want {
				t.Errorf("Corefile:\n%s\nwant:\n%s", cm.Data[corefileKey], tc.want)
			}
		})
	}
}

// TestDeleteJoinedPDB: the replace mode's PodDisruptionBudget goes with the restore where join alone wrote it, and
// stays where another manager (Helm, the cluster's installer) has fields of it.
func TestDeleteJoinedPDB(t *testing.T) {
	ctx := context.Background()
	pdb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": map[string]any{"namespace": dnsNamespace, "name": dnsDeployment},
		"spec":     map[string]any{"minAvailable": int64(1)},
	}}
	for _, tc := range []struct {
		managers []string
		deleted  bool
	}{
		{[]string{fieldOwner}, true},
		{[]string{"helm"}, false},
		{[]string{fieldOwner, "kubeadm"}, false},
		{nil, false},
	} {
		t.Run(strings.Join(tc.managers, ","), func(t *testing.T) {
			c := newFake()
			for _, m := range tc.managers {
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(pdb.DeepCopy()), client.FieldOwner(m), client.ForceOwnership); err != nil {
					t.Fatal(err)
				}
			}
			deleted, err := deleteJoinedPDB(ctx, c)
			if err != nil || deleted != tc.deleted {
				t.Errorf("deleteJoinedPDB = %v, %v; want %v", deleted, err, tc.deleted)
			}
			err = c.Get(ctx, coreDNSObject, &policyv1.PodDisruptionBudget{})
			if gone := apierrors.IsNotFound(err); gone != (tc.deleted || len(tc.managers) == 0) {
				t.Errorf("the PodDisruptionBudget after: %v", err)
			}
		})
	}
}

func TestJoinedOnly(t *testing.T) {
	entry := func(manager, subresource string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply, Subresource: subresource}
	}
	for _, tc := range []struct {
		name   string
		fields []metav1.ManagedFieldsEntry
		want   bool
	}{
		{"join's", []metav1.ManagedFieldsEntry{entry(fieldOwner, "")}, true},
		{"join's, with the disruption controller's status", []metav1.ManagedFieldsEntry{entry(fieldOwner, ""), entry("kube-controller-manager", "status")}, true},
		{"Helm's", []metav1.ManagedFieldsEntry{entry("helm", "")}, false},
		{"join's and another's", []metav1.ManagedFieldsEntry{entry(fieldOwner, ""), entry("kubectl", "")}, false},
		{"a status only", []metav1.ManagedFieldsEntry{entry("kube-controller-manager", "status")}, false},
		{"none", nil, false},
	} {
		if got := joinedOnly(tc.fields); got != tc.want {
			t.Errorf("%s: joinedOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
}
