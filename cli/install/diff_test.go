package install

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	lines := func(n int) []string {
		var l []string
		for i := 1; i <= n; i++ {
			l = append(l, "line "+string(rune('a'+i-1)))
		}
		return l
	}
	text := func(l []string) string {
		if len(l) == 0 {
			return ""
		}
		return strings.Join(l, "\n") + "\n"
	}
	twelve := lines(12)
	with := func(i int, v string) []string {
		l := append([]string(nil), twelve...)
		l[i] = v
		return l
	}
	for _, tc := range []struct {
		name string
		a, b []string
		want string
	}{
		{"equal", twelve, twelve, ""},
		{"one line in the middle", twelve, with(5, "LINE F"), `--- live
+++ after join
@@ -3,7 +3,7 @@
 line c
 line d
 line e
-line f
+LINE F
 line g
 line h
 line i
`},
		{"first line, context cut at the start", twelve, with(0, "LINE A"), `--- live
+++ after join
@@ -1,4 +1,4 @@
-line a
+LINE A
 line b
 line c
 line d
`},
		{"an insertion at the end", twelve[:3], append(append([]string(nil), twelve[:3]...), "new"), `--- live
+++ after join
@@ -1,3 +1,4 @@
 line a
 line b
 line c
+new
`},
		{"from nothing", nil, []string{"x", "y"}, `--- live
+++ after join
@@ -0,0 +1,2 @@
+x
+y
`},
		{"to nothing", []string{"x"}, nil, `--- live
+++ after join
@@ -1,1 +0,0 @@
-x
`},
		{"changes far apart, two hunks", twelve, with(0, "LINE A")[:11:11], `--- live
+++ after join
@@ -1,4 +1,4 @@
-line a
+LINE A
 line b
 line c
 line d
@@ -9,4 +9,3 @@
 line i
 line j
 line k
-line l
`},
		{"7 unchanged lines between changes, two hunks", with(0, "LINE A")[:11], twelve[:8], `--- live
+++ after join
@@ -1,4 +1,4 @@
-LINE A
+line a
 line b
 line c
 line d
@@ -6,6 +6,3 @@
 line f
 line g
 line h
-line i
-line j
-line k
`},
		{"6 unchanged lines between changes, one hunk", with(0, "LINE A")[:11], twelve[:7], `--- live
+++ after join
@@ -1,11 +1,7 @@
-LINE A
+line a
 line b
 line c
 line d
 line e
 line f
 line g
-line h
-line i
-line j
-line k
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unifiedDiff("live", "after join", text(tc.a), text(tc.b), 3); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestMergeChange(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		prev, before, next, want map[string]any
	}{
		{
			name: "both created: the later write's fields join the earlier's",
			prev: map[string]any{"data": map[string]any{"cluster": "a"}, "metadata": map[string]any{"name": "m"}},
			next: map[string]any{"data": map[string]any{"cluster": "a", "region": "eu"}, "metadata": map[string]any{"name": "m"}},
			want: map[string]any{"data": map[string]any{"cluster": "a", "region": "eu"}, "metadata": map[string]any{"name": "m"}},
		},
		{
			name:   "live: the earlier write's change stays where the later one keeps the live value",
			before: map[string]any{"data": map[string]any{"cluster": "a", "region": "us"}, "x": "1"},
			prev:   map[string]any{"data": map[string]any{"cluster": "a", "region": "us"}, "x": "2"},
			next:   map[string]any{"data": map[string]any{"cluster": "a", "region": "eu"}, "x": "1"},
			want:   map[string]any{"data": map[string]any{"cluster": "a", "region": "eu"}, "x": "2"},
		},
		{
			name:   "live: a key the later write drops goes",
			before: map[string]any{"data": map[string]any{"cluster": "a", "region": "us"}},
			prev:   map[string]any{"data": map[string]any{"cluster": "a", "region": "us"}},
			next:   map[string]any{"data": map[string]any{"cluster": "a"}},
			want:   map[string]any{"data": map[string]any{"cluster": "a"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeChange(tc.prev, tc.before, tc.next); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	live := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "x", "namespace": "y", "resourceVersion": "7", "uid": "u", "generation": int64(2),
			"creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": []any{}, "labels": map[string]any{"a": "b"}},
		"data":   map[string]any{"k": "v"},
		"status": map[string]any{"phase": "Active"},
	}
	want := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "x", "namespace": "y", "labels": map[string]any{"a": "b"}},
		"data":     map[string]any{"k": "v"},
	}
	if got := normalize(live); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, ok := live["status"]; !ok {
		t.Error("normalize changed its argument")
	}
}

// TestRenderPlan: each object on a line with what would happen to it, a changed object's diff below it, and the
// counts of each cluster.
func TestRenderPlan(t *testing.T) {
	cm := func(v string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"dns": v}}
	}
	var out bytes.Buffer
	err := renderPlan(&out, []change{
		{cluster: "member", kind: "ConfigMap", name: "mcs-system/mcs-join", before: cm("standalone"), after: cm("replace")},
		{cluster: "broker", kind: "Namespace", name: "mcs-member-a", after: map[string]any{"kind": "Namespace"}},
		{cluster: "member", kind: "Deployment", name: "mcs-system/mcs-controller", before: cm("x"), after: cm("x")},
		{cluster: "member", kind: "Secret", name: "mcs-system/broker-kubeconfig", action: actionCreated, note: "not shown"},
		{cluster: "member", kind: "Service", name: "kube-system/kube-dns", action: actionConflict, note: `another field manager set .spec.ports (conflict with "kubeadm")`},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `changed    member ConfigMap mcs-system/mcs-join
    --- live
    +++ after join
    @@ -1,4 +1,4 @@
     apiVersion: v1
     data:
    -  dns: standalone
    +  dns: replace
     kind: ConfigMap
unchanged  member Deployment mcs-system/mcs-controller
created    member Secret mcs-system/broker-kubeconfig: not shown
conflict   member Service kube-system/kube-dns: another field manager set .spec.ports (conflict with "kubeadm")
dry run, member: 1 created, 1 changed, 1 unchanged, 1 in conflict
created    broker Namespace mcs-member-a
dry run, broker: 1 created, 0 changed, 0 unchanged
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
