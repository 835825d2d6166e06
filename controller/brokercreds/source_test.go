package brokercreds

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"vksfleet.dev/fleet/mcs/brokercred"
)

// delivery is one call of a Source's deliver.
type delivery struct {
	data string
	err  error
}

// runSource runs src until the test ends and returns what it delivers.
func runSource(t *testing.T, src Source) <-chan delivery {
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan delivery, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, func(b []byte, err error) { got <- delivery{string(b), err} })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return got
}

// next waits for the next delivery.
func next(t *testing.T, got <-chan delivery) delivery {
	t.Helper()
	select {
	case d := <-got:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered")
		return delivery{}
	}
}

// TestFileSourceFollowsAMountedSecret swaps the `..data` symlink as the kubelet updates a mounted Secret: the file
// read by its path changes content without being written.
func TestFileSourceFollowsAMountedSecret(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "kubeconfig"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		// The kubelet's swap: a new symlink renamed over ..data.
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "kubeconfig")
	src := &FileSource{Path: path, Interval: 10 * time.Millisecond}
	got := runSource(t, src)
	if d := next(t, got); d.err == nil || !strings.Contains(d.err.Error(), "no such file") {
		t.Fatalf("before the file exists: %+v", d)
	}
	version("..2026_01", "one")
	if err := os.Symlink(filepath.Join("..data", "kubeconfig"), path); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d.err != nil || d.data != "one" {
		t.Fatalf("first version: %+v", d)
	}
	version("..2026_02", "two")
	if d := next(t, got); d.err != nil || d.data != "two" {
		t.Fatalf("after the swap: %+v", d)
	}

	if err := src.Write(context.Background(), []byte("one"), []byte("three")); !errors.Is(err, ErrReplaced) {
		t.Errorf("Write over another credential: %v, want ErrReplaced", err)
	}
	if err := src.Write(context.Background(), []byte("two"), []byte("three")); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d.err != nil || d.data != "three" {
		t.Fatalf("after Write: %+v", d)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".kubeconfig.*"))
	if len(leftovers) > 0 {
		t.Errorf("Write left temporary files: %v", leftovers)
	}
}

func TestSecretSource(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "mcs-system", Name: "broker-kubeconfig"}
	kube := fake.NewClientset()
	src := &SecretSource{Client: kube, Key: key}
	got := runSource(t, src)
	if d := next(t, got); d.err == nil || !strings.Contains(d.err.Error(), "not found") {
		t.Fatalf("before the Secret exists: %+v", d)
	}
	secrets := kube.CoreV1().Secrets(key.Namespace)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string][]byte{"other": []byte("x")}}
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d.err == nil || !strings.Contains(d.err.Error(), `no key "kubeconfig"`) {
		t.Fatalf("without the key: %+v", d)
	}
	secret.Data = map[string][]byte{brokercred.SecretKey: []byte("one")}
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d.err != nil || d.data != "one" {
		t.Fatalf("with the key: %+v", d)
	}
	if err := src.Write(ctx, []byte("other"), []byte("two")); !errors.Is(err, ErrReplaced) {
		t.Errorf("Write over another credential: %v, want ErrReplaced", err)
	}
	if err := src.Write(ctx, []byte("one"), []byte("two")); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d.err != nil || d.data != "two" {
		t.Fatalf("after Write: %+v", d)
	}
	if err := secrets.Delete(ctx, key.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d.err == nil || !strings.Contains(d.err.Error(), "deleted") {
		t.Fatalf("after the delete: %+v", d)
	}
}
