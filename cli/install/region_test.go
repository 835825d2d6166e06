package install

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
)

// TestMemberRegion: join takes the member's region from --region, else from its ClusterProperty, else records
// none; a region that is no label value fails the join.
func TestMemberRegion(t *testing.T) {
	property := &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.RegionName},
		Spec: aboutv1alpha1.ClusterPropertySpec{Value: "eu-west"}}
	invalid := property.DeepCopy()
	invalid.Spec.Value = "eu west"
	for _, tt := range []struct {
		name    string
		flag    string
		objs    []client.Object
		want    string
		wantErr bool
	}{
		{"--region", "us-east", []client.Object{property}, "us-east", false},
		{"the ClusterProperty", "", []client.Object{property}, "eu-west", false},
		{"neither", "", nil, "", false},
		{"--region no label value", "us east", nil, "", true},
		{"a ClusterProperty no label value", "", []client.Object{invalid}, "", true},
		{"--region over a ClusterProperty no label value", "us-east", []client.Object{invalid}, "us-east", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tt.objs...).Build()
			got, _, err := memberRegion(context.Background(), m, tt.flag)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("region %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRecordRegion: join records the region in the member's directory entry, where the controller reads it;
// granting reads again (a later join's, or another member's) keeps it, and a join that finds none removes it.
func TestRecordRegion(t *testing.T) {
	ctx := context.Background()
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(recordReadersBinding()).Build()
	region := func() string {
		t.Helper()
		var entries corev1.ConfigMapList
		if err := b.List(ctx, &entries, client.InNamespace(broker.DirectoryNamespace)); err != nil {
			t.Fatal(err)
		}
		members, refused := broker.ReadDirectory(entries.Items)
		if len(members) != 1 || len(refused) > 0 {
			t.Fatalf("directory lists %+v, refuses %v; want member a alone", members, refused)
		}
		return members[0].Region
	}
	for _, step := range []struct {
		name string
		do   func() error
		want string
	}{
		{"listed", func() error { _, err := GrantReads(ctx, b, "a"); return err }, ""},
		{"region recorded", func() error { return recordRegion(ctx, b, "a", "eu-west") }, "eu-west"},
		{"reads granted again", func() error { _, err := GrantReads(ctx, b, "a"); return err }, "eu-west"},
		{"another region", func() error { return recordRegion(ctx, b, "a", "us-east") }, "us-east"},
		{"none", func() error { return recordRegion(ctx, b, "a", "") }, ""},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := region(); got != step.want {
			t.Errorf("%s: region %q, want %q", step.name, got, step.want)
		}
	}
}
