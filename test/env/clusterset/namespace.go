package clusterset

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreateNamespace creates the namespace name in each of the clusters, failing t with the cluster named: for the
// tests of this package, the plugin's integration tests and the suites alike.
func CreateNamespace(t testing.TB, name string, in ...*Cluster) {
	t.Helper()
	for _, c := range in {
		if err := c.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatalf("creating namespace %s in %s: %v", name, c.Name, err)
		}
	}
}
