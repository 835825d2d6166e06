package brokercreds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// Source is where the broker kubeconfig lives: a file or a Secret of the member cluster.
type Source interface {
	// Run calls deliver with the kubeconfig's content each time it changes, or with why there is none (missing,
	// unreadable), until ctx ends. Calls may come from more than one goroutine.
	Run(ctx context.Context, deliver func(kubeconfig []byte, err error))
	// Write replaces the kubeconfig with next if it still holds prev; ErrReplaced if it holds something else.
	Write(ctx context.Context, prev, next []byte) error
	// String names the source for logs and errors.
	String() string
}

// ErrReplaced is Source.Write's error when the kubeconfig no longer holds the credential that was renewed: an
// operator replaced it meanwhile, and their credential wins.
var ErrReplaced = errors.New("the broker kubeconfig was replaced meanwhile")

// SecretKey is the key of the broker Secret that holds the kubeconfig.
const SecretKey = "kubeconfig"

// FileSource is a kubeconfig file, read every Interval. Reading the content by its path, rather than watching the
// file, also follows the kubelet's swap of the `..data` symlink of a mounted Secret or ConfigMap.
type FileSource struct {
	Path     string
	Interval time.Duration
}

// Run reads the file at once and then every Interval, delivering what changed.
func (s *FileSource) Run(ctx context.Context, deliver func([]byte, error)) {
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()
	var last []byte
	var lastErr string
	first := true
	for {
		data, err := os.ReadFile(s.Path)
		switch {
		case err != nil && (first || err.Error() != lastErr):
			deliver(nil, fmt.Errorf("reading the broker kubeconfig %s: %w", s.Path, err))
			last, lastErr = nil, err.Error()
		case err == nil && (first || lastErr != "" || !bytes.Equal(data, last)):
			deliver(data, nil)
			last, lastErr = data, ""
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Write replaces the file atomically: a temporary file in the same directory, renamed over it, so that no reader
// ever sees half a kubeconfig.
func (s *FileSource) Write(_ context.Context, prev, next []byte) error {
	cur, err := os.ReadFile(s.Path)
	if err != nil {
		return fmt.Errorf("reading the broker kubeconfig %s: %w", s.Path, err)
	}
	if !bytes.Equal(cur, prev) {
		return ErrReplaced
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.Path), "."+filepath.Base(s.Path)+".")
	if err != nil {
		return fmt.Errorf("writing the broker kubeconfig %s: %w (with a read-only file, such as a mounted Secret, use --broker-secret)", s.Path, err)
	}
	_, err = tmp.Write(next)
	err = errors.Join(err, tmp.Chmod(0o600), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), s.Path)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("writing the broker kubeconfig %s: %w", s.Path, err), os.Remove(tmp.Name()))
	}
	return nil
}

func (s *FileSource) String() string { return "file " + s.Path }

// SecretSource is the key "kubeconfig" of a Secret in the member cluster, watched by name: the list and watch
// carry the field selector metadata.name, which lets RBAC restrict them to this Secret with resourceNames.
type SecretSource struct {
	Client kubernetes.Interface
	Key    types.NamespacedName
}

// Run watches the Secret until ctx ends.
func (s *SecretSource) Run(ctx context.Context, deliver func([]byte, error)) {
	lw := cache.NewListWatchFromClient(s.Client.CoreV1().RESTClient(), "secrets", s.Key.Namespace,
		fields.OneTermEqualSelector("metadata.name", s.Key.Name))
	seen := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		data, ok := secret.Data[SecretKey]
		if !ok {
			deliver(nil, fmt.Errorf("secret %s has no key %q", s.Key, SecretKey))
			return
		}
		deliver(data, nil)
	}
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    seen,
			UpdateFunc: func(_, obj any) { seen(obj) },
			DeleteFunc: func(any) { deliver(nil, fmt.Errorf("secret %s was deleted", s.Key)) },
		},
	})
	go func() {
		// An informer of a missing Secret delivers nothing: say so once its first list is in.
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			return
		}
		if _, exists, _ := store.GetByKey(s.Key.String()); !exists {
			deliver(nil, fmt.Errorf("secret %s not found: create it with the key %q holding the broker kubeconfig", s.Key, SecretKey))
		}
	}()
	informer.RunWithContext(ctx)
}

// Write updates the Secret with next if it still holds prev, re-reading it after a conflict.
func (s *SecretSource) Write(ctx context.Context, prev, next []byte) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		secret, err := s.Client.CoreV1().Secrets(s.Key.Namespace).Get(ctx, s.Key.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading secret %s: %w", s.Key, err)
		}
		if !bytes.Equal(secret.Data[SecretKey], prev) {
			return ErrReplaced
		}
		secret.Data[SecretKey] = next
		_, err = s.Client.CoreV1().Secrets(s.Key.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("updating secret %s: %w", s.Key, err)
		}
		return err
	})
}

func (s *SecretSource) String() string { return "secret " + s.Key.String() }
